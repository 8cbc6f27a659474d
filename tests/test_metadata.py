"""Project metadata: CITATION.cff (CFF 1.2.0, citing posenc and the papers it implements) and
pyproject's classifiers. Links and URLs are checked in tests/test_links.py."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
META = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

yaml = pytest.importorskip("yaml")

CFF = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))

#: The papers whose methods posenc implements (arXiv ids), each of which CITATION.cff must cite.
IMPLEMENTED = {
    "2107.02561": "Zheng et al., Rethinking Positional Encoding",
    "2106.02795": "Li et al., Learnable Fourier Features (NeurIPS 2021)",
    "2106.03143": "Likhomanenko et al., CAPE (NeurIPS 2021)",
    "2106.12566": "Luo et al., Kernelized Attention with RPE (NeurIPS 2021)",
    "2105.03821": "Lu et al., Graph Inference Representation",
    "1906.04817": "You et al., P-GNN (ICML 2019)",
    "2108.04392": "Wang et al., DARTS-PT (ICLR 2021)",
    "2104.09864": "Su et al., RoFormer (RoPE)",
    "2108.12409": "Press et al., ALiBi (ICLR 2022)",
    "2309.00071": "Peng et al., YaRN",
    "2212.10554": "Sun et al., xPos",
    "1910.10683": "Raffel et al., T5 relative buckets",
    "2306.15595": "Chen et al., position interpolation",
    "2403.13298": "Heo et al., RoPE for ViT (ECCV 2024)",
}

# CFF 1.2.0 (https://github.com/citation-file-format/citation-file-format, schema.json):
# the keys a file and a reference must have, and the reference types used here.
REFERENCE_TYPES = {"article", "conference-paper", "book", "report", "software", "thesis", "generic"}


def _person_ok(p: dict) -> bool:
    return isinstance(p, dict) and (bool(p.get("name")) or bool(p.get("family-names") and p.get("given-names")))


def test_citation_file_follows_cff_1_2_0():
    assert CFF["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors", "type", "version", "license"):
        assert CFF.get(key), f"CITATION.cff has no {key!r}"
    assert CFF["type"] == "software" and CFF["license"] == META["license"]
    import posenc

    assert str(CFF["version"]) == posenc.__version__, "CITATION.cff's version must follow posenc.__version__"
    assert all(_person_ok(p) for p in CFF["authors"])
    allowed = {"cff-version", "message", "title", "abstract", "authors", "type", "version", "license",
               "repository-code", "keywords", "references", "url", "doi", "date-released", "preferred-citation",
               "identifiers", "commit", "contact", "license-url", "repository", "repository-artifact"}
    assert set(CFF) <= allowed, f"keys CFF 1.2.0 does not define: {set(CFF) - allowed}"
    for ref in CFF["references"]:
        assert ref["type"] in REFERENCE_TYPES, ref["title"]
        assert isinstance(ref["title"], str) and ref["title"], ref
        assert ref["authors"] and all(_person_ok(p) for p in ref["authors"]), ref["title"]
        assert isinstance(ref["year"], int) and 1900 < ref["year"] < 2100, ref["title"]
        assert ref["url"].startswith("https://"), ref["title"]
        if ref["type"] == "conference-paper":
            assert ref.get("collection-title") and ref.get("conference", {}).get("name"), ref["title"]
        else:
            assert ref.get("journal"), ref["title"]
        for ident in ref.get("identifiers", []):
            assert ident["type"] in {"doi", "url", "swh", "other"} and ident["value"], ref["title"]


def test_citation_file_cites_every_implemented_paper():
    cited = {m.group(1) for ref in CFF["references"] for ident in ref.get("identifiers", [])
             if (m := re.fullmatch(r"arXiv:(\d{4}\.\d{5})", str(ident["value"])))}
    missing = {k: v for k, v in IMPLEMENTED.items() if k not in cited}
    assert not missing, f"CITATION.cff does not cite: {sorted(missing.values())}"
    titles = [r["title"] for r in CFF["references"]]
    assert len(titles) == len(set(titles)), "a paper is cited twice"


def test_citation_file_passes_cffconvert_where_installed():
    cffconvert = pytest.importorskip("cffconvert", reason="cffconvert is not installed (it pins jsonschema 3, "
                                                          "which conflicts with the jsonschema 4 that Ray needs)")
    cffconvert.Citation((ROOT / "CITATION.cff").read_text(encoding="utf-8")).validate()  # the CFF 1.2.0 schema


def test_classifiers_and_metadata():
    classifiers = META["classifiers"]
    assert len(classifiers) == len(set(classifiers))
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3.11" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers), "PEP 639: the license is the SPDX expression"
    minor = int(META["requires-python"].removeprefix(">=3."))
    versions = [int(c.rsplit(".", 1)[1]) for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert versions and min(versions) >= minor
    assert META["keywords"] and "docs" in META["optional-dependencies"]
    assert "docs" in META["optional-dependencies"]["all"][0]
