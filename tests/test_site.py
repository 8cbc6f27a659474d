"""``make docs``: the API reference site builds with ``mkdocs build --strict`` (no broken
reference, no page missing from the navigation, no missing snippet) and documents every
public module. Skipped where the ``docs`` extra is not installed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MISSING = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
           if importlib.util.find_spec(m.split(".")[0]) is None
           or (m.count(".") and importlib.util.find_spec(m) is None)]

pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"the docs extra is not installed (no {', '.join(MISSING)}): "
                                                      'pip install "posenc[docs]"')

#: Public packages, each with its page under docs/api/ and one object it must show.
API = {"posenc": "posenc.create_encoding", "positions": "posenc.positions.cape_augment",
       "encodings": "posenc.encodings.GaussianEncoding", "analysis": "posenc.analysis.stable_rank",
       "attention": "posenc.attention.RelativeMHA", "graph": "posenc.graph.AddAnchorPE",
       "models": "posenc.models.TinyViT", "search": "posenc.search.perturbation_select",
       "interop": "posenc.interop.set_pos_encoding"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    # a proxy that refuses every connection: a build that reaches for the network fails here
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY":
           "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "NO_PROXY": ""}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{tail}"
    return out


@pytest.mark.slow
def test_site_builds_strict_and_documents_every_public_package(site):
    for page, obj in API.items():
        html = (site / "api" / page / "index.html").read_text(encoding="utf-8")
        assert f'id="{obj}"' in html, f"docs/api/{page}.md does not render {obj}"
    for page in ("results", "changelog", "timm", "api/support"):
        assert (site / page / "index.html").exists(), page
    assert "Unreleased" in (site / "changelog" / "index.html").read_text(encoding="utf-8")
    # every guide in docs/ is in the navigation (mkdocs --strict does not fail on orphans)
    import yaml

    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for md in sorted((ROOT / "docs").rglob("*.md")):
        rel = md.relative_to(ROOT / "docs").as_posix()
        assert f": {rel}" in nav, f"docs/{rel} is not in mkdocs.yml's nav"
    assert yaml is not None


@pytest.mark.slow
def test_site_needs_nothing_from_the_network(site):
    # Material's fonts are off (font: false): no page asks a font service for anything
    for html in site.rglob("*.html"):
        text = html.read_text(encoding="utf-8")
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text, html
