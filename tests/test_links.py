"""Every link works where it is read: no URL to a host or page that does not exist.

posenc has no published repository, site or package index page, so no file may point at
one: the README links to the guides by relative paths (a clone, any forge), the wheel's
long description names those files as text (a package index page has no files around it),
and pyproject.toml, CITATION.cff, mkdocs.yml, the docs, the built wheel and the built site
carry only URLs of the real hosts in :data:`ALLOWED` (papers, code that the guides cite,
the PyTorch wheel index, the site theme's own page). A new host is a deliberate addition to
that list, with the page it serves.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
import zipfile
from email import message_from_string
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Hosts whose pages the project's files cite, and why.
ALLOWED = {
    "arxiv.org": "the implemented papers (CITATION.cff)",
    "jmlr.org": "the T5 paper (CITATION.cff)",
    "semver.org": "CHANGELOG.md's versioning",
    "download.pytorch.org": "PyTorch's CPU wheel index (install notes)",
    "squidfunk.github.io": "the site theme's own page (its footer)",
    "localhost": "the local server the site's search note suggests",
    "github.com": "only the repositories in GITHUB",
}
#: GitHub repositories that exist and that the guides cite (owner/name).
GITHUB = {"huggingface/pytorch-image-models", "lucidrains/performer-pytorch", "idiap/fast-transformers"}

URL = re.compile(r"https?://[^\s\"'<>()\[\]`\\]+")
#: XML namespace names (inline SVG): identifiers, not links.
XMLNS = re.compile(r"xmlns(?::\w+)?=\"[^\"]*\"")


def urls(text: str) -> list[str]:
    """The absolute http(s) URLs in ``text`` (trailing punctuation dropped; no XML namespaces)."""
    found = [u.rstrip(".,;:!?*") for u in URL.findall(XMLNS.sub("", text))]
    return [u for u in found if urlsplit(u).hostname]  # "https://..." in prose names no host


def not_allowed(text: str) -> list[str]:
    """The URLs in ``text`` whose host (or GitHub repository) is not in :data:`ALLOWED` / :data:`GITHUB`."""
    bad = []
    for url in urls(text):
        parts = urlsplit(url)
        host = (parts.hostname or "").removeprefix("www.")
        if host not in ALLOWED:
            bad.append(url)
        elif host == "github.com" and "/".join(parts.path.strip("/").split("/")[:2]) not in GITHUB:
            bad.append(url)
    return bad


LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)|<(?:img|a)\b[^>]*(?:src|href)=\"(?P<html>[^\"]+)\"")


def relative_links(markdown: str) -> list[str]:
    """Relative link and image targets of Markdown text (not inside code)."""
    text = re.sub(r"^\s*```.*?^\s*```[^\n]*$|`[^`\n]*`", "", markdown, flags=re.DOTALL | re.MULTILINE)
    targets = [m["target"] or m["html"] for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"^([a-z][a-z0-9+.-]*:|#|//)", t, flags=re.IGNORECASE)]


def _setup():
    spec = importlib.util.spec_from_file_location("posenc_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines index_description; setup() runs only as __main__
    return module


def _sources() -> list[Path]:
    files = [ROOT / name for name in ("README.md", "CHANGELOG.md", "pyproject.toml", "CITATION.cff", "mkdocs.yml",
                                      "setup.py", "MANIFEST.in")]
    files += [p for p in sorted((ROOT / "docs").rglob("*")) if p.suffix in {".md", ".sh", ".json", ".yml", ".txt"}]
    return files


# --------------------------------------------------------------------------- the checks themselves
def test_url_and_link_finders():
    text = ('see https://arxiv.org/abs/2107.02561. and <https://github.com/posenc/posenc>, '
            '<svg xmlns="http://www.w3.org/2000/svg"> [a](https://github.com/idiap/fast-transformers/issues/30)')
    assert urls(text) == ["https://arxiv.org/abs/2107.02561", "https://github.com/posenc/posenc",
                          "https://github.com/idiap/fast-transformers/issues/30"]
    assert not_allowed(text) == ["https://github.com/posenc/posenc"]
    assert not_allowed("https://example.org/x http://localhost:8000 (``https://...``)") == ["https://example.org/x"]
    md = ("[a](docs/x.md) [b](https://e.org) ![c](img.png) [d](#top) <img src=\"logo.png\">\n"
          "`[e](in/code.md)`\n```\n[f](in/block.md)\n```\n")
    assert relative_links(md) == ["docs/x.md", "img.png", "logo.png"]


# --------------------------------------------------------------------------- the sources
def test_source_files_link_only_to_real_hosts():
    for path in _sources():
        bad = not_allowed(path.read_text(encoding="utf-8"))
        assert not bad, f"{path.relative_to(ROOT)} names URLs of no real page: {bad[:5]}"


def test_metadata_names_no_url_that_does_not_exist():
    import yaml

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert not not_allowed(" ".join(meta.get("urls", {}).values()))
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert not not_allowed(" ".join(str(cff.get(k, "")) for k in ("repository-code", "url", "repository")))
    mk = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", "#"))
    # no site_url (canonical links, sitemap and 404 asset paths would point at it), no repository link
    assert not mk.get("site_url") and not mk.get("repo_url") and not mk.get("edit_uri")
    assert mk["use_directory_urls"] is False  # pages link to files: the site works opened from disk


def test_readme_and_guides_link_to_files_that_exist():
    # relative links work in a clone and on any forge, if their files are there
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        links = relative_links(path.read_text(encoding="utf-8"))
        for link in links:
            target = (path.parent / link.split("#")[0]).resolve()
            assert target.exists(), f"{path.relative_to(ROOT)} links to {link}, which does not exist"
    assert len(relative_links((ROOT / "README.md").read_text(encoding="utf-8"))) >= 10


def test_long_description_names_the_readme_links_as_text():
    setup = _setup()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    out = setup.index_description(readme)
    assert relative_links(readme) and not relative_links(out)
    assert "timm guide (`docs/timm.md`)" in out and "`docs/coords.md`" in out and setup.FILES_NOTE in out
    assert out.index(setup.FILES_NOTE) < out.index("## Install")
    # code is left alone, absolute links are kept, an image keeps its alt text
    sample = "# T\n\n[a](x.md) `[b](y.md)` [c](https://arxiv.org/abs/1) ![logo](l.png)\n```\n[d](z.md)\n```\n"
    assert setup.index_description(sample) == (f"# T\n\n{setup.FILES_NOTE}\n\na (`x.md`) `[b](y.md)` "
                                               "[c](https://arxiv.org/abs/1) logo\n```\n[d](z.md)\n```\n")
    assert setup.index_description("no links") == "no links"


# --------------------------------------------------------------------------- the built artifacts
@pytest.mark.slow
def test_built_wheel_metadata_has_no_dead_link(built_dists):
    with zipfile.ZipFile(built_dists["wheel"]) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = zf.read(name).decode("utf-8")
    msg = message_from_string(metadata)
    description = msg.get_payload()
    assert msg["Description-Content-Type"] == "text/markdown"
    assert description.strip() == _setup().index_description(
        (built_dists["source"] / "README.md").read_text(encoding="utf-8")).strip()
    assert not relative_links(description), relative_links(description)[:5]
    assert not not_allowed(metadata), not_allowed(metadata)[:5]
    assert not msg.get_all("Project-URL") or not not_allowed(" ".join(msg.get_all("Project-URL")))
    # the sdist's PKG-INFO carries the same description
    import tarfile

    with tarfile.open(built_dists["sdist"]) as tar:
        (info,) = [m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")]
        pkg_info = tar.extractfile(info).read().decode("utf-8")
    assert not relative_links(message_from_string(pkg_info).get_payload()) and not not_allowed(pkg_info)


@pytest.mark.slow
def test_built_site_has_no_dead_link(built_site):
    pages = [p for p in sorted(built_site.rglob("*")) if p.suffix in {".html", ".xml", ".json", ".js"}
             and "assets" not in p.relative_to(built_site).parts]
    assert len(pages) > 20
    for page in pages:
        text = page.read_text(encoding="utf-8")
        bad = not_allowed(text)
        assert not bad, f"site/{page.relative_to(built_site)}: {bad[:5]}"
        assert '<link rel="canonical"' not in text, page.name
    # the 404 page's assets are on this site (root-relative), not on another host
    html = (built_site / "404.html").read_text(encoding="utf-8")
    assets = re.findall(r'(?:href|src)="([^"#]+)"', html)
    assert assets and all(a.startswith("/") and not a.startswith("//") or urlsplit(a).hostname in ALLOWED
                          for a in assets), [a for a in assets if not a.startswith("/")][:5]
