"""``make docs``: the API reference site builds with ``mkdocs build --strict`` (no broken
reference, no page missing from the navigation, no missing snippet), documents every public
module, reads well (no raw Sphinx role, no parameter with a default shown as "required") and
works opened from disk. The site is built once per session (``built_site`` in conftest.py);
skipped where the ``docs`` extra is not installed. URLs are checked in tests/test_links.py."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tools/ (the site's Griffe extension and hooks)

#: Public packages, each with its page under docs/api/ and one object it must show.
API = {"posenc": "posenc.create_encoding", "positions": "posenc.positions.cape_augment",
       "encodings": "posenc.encodings.GaussianEncoding", "analysis": "posenc.analysis.stable_rank",
       "attention": "posenc.attention.RelativeMHA", "graph": "posenc.graph.AddAnchorPE",
       "models": "posenc.models.TinyViT", "search": "posenc.search.perturbation_select",
       "interop": "posenc.interop.set_pos_encoding"}

#: A Sphinx role left as text: ``:class:`X``` (as written, or once Markdown made ``<code>`` of it).
RAW_ROLE = re.compile(r":(?:py:)?[a-z]+:(?:`|<code>)")

#: Docstring entries naming a parameter the signature does not have (a documentation slip in
#: the source, shown as "required"); new ones fail the test.
NOT_IN_SIGNATURE = {("posenc.encodings.CoordinateEncoding", "device"), ("posenc.encodings.CoordinateEncoding", "dtype")}


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


def _text(html: str) -> str:
    """The page's text: no tags, no script or style."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.DOTALL)
    return re.sub(r"<[^>]+>", "", html)


@pytest.mark.slow
def test_site_builds_strict_and_documents_every_public_package(built_site):
    for page, obj in API.items():
        html = (built_site / "api" / f"{page}.html").read_text(encoding="utf-8")
        assert f'id="{obj}"' in html, f"docs/api/{page}.md does not render {obj}"
    for page in ("results", "changelog", "timm", "api/support"):
        assert (built_site / f"{page}.html").exists(), page
    assert "Unreleased" in (built_site / "changelog.html").read_text(encoding="utf-8")
    # every guide in docs/ is in the navigation (mkdocs --strict does not fail on orphans)
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for md in sorted((ROOT / "docs").rglob("*.md")):
        rel = md.relative_to(ROOT / "docs").as_posix()
        assert f": {rel}" in nav, f"docs/{rel} is not in mkdocs.yml's nav"


@pytest.mark.slow
def test_site_needs_nothing_from_the_network(built_site):
    # Material's fonts are off (font: false): no page asks a font service for anything
    for html in built_site.rglob("*.html"):
        text = html.read_text(encoding="utf-8")
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text, html
        assert not re.search(r"<script[^>]+src=\"https?:", text), f"{html.name} loads a script from the network"


@pytest.mark.slow
def test_site_works_opened_from_disk(built_site):
    # every page links to files (no directory URLs, which a browser shows as a listing from disk)
    checked = 0
    for page in _pages(built_site):
        for url in re.findall(r'(?:href|src)="([^"]*)"', page.read_text(encoding="utf-8")):
            parts = urlsplit(url)
            if parts.scheme or parts.netloc or not parts.path or url.startswith(("#", "data:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            assert target.is_file(), f"{page.relative_to(built_site)} links to {url}, not a file"
            checked += 1
    assert checked > 500
    # no sitemap of bare paths (there is no site_url to make them absolute)
    assert not (built_site / "sitemap.xml").exists() and not (built_site / "sitemap.xml.gz").exists()
    # search: opened from file://, the search box says that it needs a server (no worker starts there)
    from tools.mkdocs_hooks import FILE_SEARCH_NOTE

    for page in _pages(built_site):
        html = page.read_text(encoding="utf-8")
        if 'class="md-search__input"' in html:
            assert 'window.location.protocol !== "file:"' in html and FILE_SEARCH_NOTE in html, page.name
    assert "mkdocs serve" in FILE_SEARCH_NOTE and "http.server" in FILE_SEARCH_NOTE


@pytest.mark.slow
def test_site_has_no_raw_sphinx_role_and_roles_are_links(built_site):
    for page in _pages(built_site):
        text = page.read_text(encoding="utf-8")
        raw = sorted({m.group(0) + text[m.end():m.end() + 30].split("<")[0] for m in RAW_ROLE.finditer(text)})
        assert not raw, f"{page.relative_to(built_site)}: raw roles {raw[:5]}"
        assert "<autoref" not in text, f"{page.name}: an unprocessed cross-reference"
    api = {p.name: p.read_text(encoding="utf-8") for p in (built_site / "api").glob("*.html")}
    # ":class:`~posenc.attention.RelativeSelfAttention`" in RelativeMHA's docstring: a link, short title
    assert any(re.search(r'<a class="autorefs autorefs-internal"[^>]*href="[\w.-]*#posenc\.attention\.'
                         r'RelativeSelfAttention"[^>]*><code>RelativeSelfAttention</code></a>', html)
               for html in api.values())
    # ":func:`~posenc.interop.set_pos_encoding`" in interop's module docstring
    assert re.search(r'href="#posenc\.interop\.set_pos_encoding"[^>]*><code>set_pos_encoding</code></a>', api["interop.html"])
    # across pages: ":class:`posenc.models.TransformerEncoder`" from another API page
    assert any(re.search(r'href="models\.html#posenc\.models\.TransformerEncoder"', html)
               for name, html in api.items() if name != "models.html")
    links = sum(len(re.findall(r'class="autorefs autorefs-internal"', p.read_text(encoding="utf-8")))
                for p in _pages(built_site))
    assert links > 150, links


def _object(path: str):
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise LookupError(path)


_HEADING = re.compile(r'<h[1-6] id="(posenc[\w.]*)" class="doc doc-heading')
_PARAM_TABLE = re.compile(r"<table>(?:(?!</table>).)*?<th>Default</th>.*?</table>", re.DOTALL)


@pytest.mark.slow
def test_site_shows_no_parameter_with_a_default_as_required(built_site):
    rows = 0
    unknown = set()
    for page in sorted((built_site / "api").glob("*.html")):
        html = page.read_text(encoding="utf-8")
        events = sorted([(m.start(), "heading", m.group(1)) for m in _HEADING.finditer(html)]
                        + [(m.start(), "table", m.group(0)) for m in _PARAM_TABLE.finditer(html)])
        owner = None
        for _, kind, value in events:
            if kind == "heading":
                owner = value
                continue
            params = inspect.signature(_object(owner)).parameters
            for row in re.findall(r'<tr class="doc-section-item">(.*?)</tr>', value, flags=re.DOTALL):
                cells = re.findall(r"<td>(.*?)</td>", row, flags=re.DOTALL)
                name = _text(cells[0]).strip()
                rows += 1
                assert not re.search(r"[,/]", name), f"{owner}: a grouped entry {name!r} ({page.name})"
                param = params.get(name.lstrip("*"))
                if "<em>required</em>" not in cells[-1]:
                    continue
                if param is None:
                    unknown.add((owner, name))
                    continue
                assert param.default is inspect.Parameter.empty, f"{owner}({name}={param.default!r}) shows 'required'"
                assert param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD), f"{owner}: {name} 'required'"
    assert rows > 500, rows
    assert unknown <= NOT_IN_SIGNATURE, f"documented parameters that the signature lacks: {unknown - NOT_IN_SIGNATURE}"


@pytest.mark.slow
def test_grouped_args_entries_in_the_source_render_one_row_per_name(built_site):
    # device, dtype: in grid_1d's docstring -> two rows with the signature's defaults (None)
    html = (built_site / "api" / "positions.html").read_text(encoding="utf-8")
    section = html[html.index('id="posenc.positions.grid_1d"'):html.index('id="posenc.positions.grid"')]
    for name in ("device", "dtype"):
        row = re.search(rf"<td>\s*<code>{name}</code>\s*</td>(.*?)</tr>", section, flags=re.DOTALL)
        assert row and "<code>None</code>" in row.group(1), name


# --------------------------------------------------------------------------- the conversions
def test_convert_roles():
    from tools.griffe_docstrings import convert_roles

    known = {"posenc.interop.set_pos_encoding": "posenc.interop.set_pos_encoding", "grid": "posenc.positions.grid",
             "Encoding.encode": "posenc.encodings.base.Encoding.encode"}
    text = ("See :func:`~posenc.interop.set_pos_encoding`, :func:`grid`, :meth:`Encoding.encode`, "
            ":py:func:`the grid <grid>`, :data:`torch.float32`, :func:`!grid` and ``:class:`kept` ``.")
    out = convert_roles(text, known.get)
    assert out == ('See <autoref identifier="posenc.interop.set_pos_encoding" optional>`set_pos_encoding`</autoref>, '
                   '<autoref identifier="posenc.positions.grid" optional>`grid`</autoref>, '
                   '<autoref identifier="posenc.encodings.base.Encoding.encode" optional>`Encoding.encode`</autoref>, '
                   '<autoref identifier="posenc.positions.grid" optional>`the grid`</autoref>, '
                   "`torch.float32`, `grid` and ``:class:`kept` ``.")
    assert convert_roles("no roles: a:b `c`", known.get) == "no roles: a:b `c`"


def test_split_grouped_entries():
    from tools.griffe_docstrings import split_grouped_entries

    doc = ("Summary.\n\nArgs:\n    x: the input.\n    device, dtype: of the buffers,\n        and more.\n"
           "    steps / epochs (int): length.\n    a, b,\n    c: as in torch.\n\nReturns:\n    p, q: not parameters.\n")
    assert split_grouped_entries(doc) == (
        "Summary.\n\nArgs:\n    x: the input.\n    device: of the buffers,\n        and more.\n"
        "    dtype: of the buffers,\n        and more.\n    steps (int): length.\n    epochs (int): length.\n"
        "    a: as in torch.\n    b: as in torch.\n    c: as in torch.\n\nReturns:\n    p, q: not parameters.\n")
    plain = "Args:\n    x: one, two: three.\n        more\n"
    assert split_grouped_entries(plain) == plain


def test_role_resolution_follows_sphinx_scopes():
    import griffe

    from tools.griffe_docstrings import resolver

    loader = griffe.GriffeLoader(search_paths=[str(ROOT / "src")])
    pkg = loader.load("posenc")
    loader.resolve_aliases(implicit=False, external=False)
    # in LearnedTableEncoding's docstring: a method of the class, a function of its module
    enc = pkg["encodings.learnable.LearnedTableEncoding"]
    resolve = resolver(enc, loader.modules_collection, "posenc")
    assert resolve("table") == "posenc.encodings.learnable.LearnedTableEncoding.table"
    assert resolve("resample_table") == "posenc.encodings.learnable.resample_table"
    # a full path through a re-export, a path under posenc, and names that are not posenc's
    assert resolve("posenc.graph.AddAnchorPE") == "posenc.graph.transforms.AddAnchorPE"
    assert resolve("interop.set_pos_encoding") == "posenc.interop.set_pos_encoding"
    assert resolve("torch.nn.Module") is None and resolve("no_such_name") is None
    # in interop's module docstring: a name imported there (an alias) resolves to its definition
    interop = resolver(pkg["interop"], loader.modules_collection, "posenc")
    assert interop("LearnedTableEncoding") == "posenc.encodings.learnable.LearnedTableEncoding"
    assert interop("set_pos_encoding") == "posenc.interop.set_pos_encoding"


@pytest.mark.slow
def test_the_attention_page_puts_the_main_classes_first_then_functions_then_internals(built_site):
    import re

    import posenc.attention as A

    html = (built_site / "api" / "attention.html").read_text(encoding="utf-8")
    order: list[str] = []
    for name in re.findall(r'<h3 id="posenc\.attention\.(\w+)" class="doc doc-heading"', html):
        if name not in order:
            order.append(name)
    assert sorted(order) == sorted(A.__all__), "the page renders every name of posenc.attention, once"
    assert order[:3] == ["RotaryEmbedding", "RelativeMHA", "KernelizedMHA"]
    first_function = min(order.index(n) for n in order if not isinstance(getattr(A, n), type))
    assert all(isinstance(getattr(A, n), type) for n in order[:first_function])
    assert order.index("kernelized_attention") < order.index("DecayDecoder") < order.index("toeplitz_matmul")


@pytest.mark.slow
def test_collapsed_sections_render_their_markdown(built_site):
    # the results page's full-profile reports and the guides' history sections are Markdown inside
    # <details>: each renders (tables as <table>, no pipe-table source left as text)
    checked = 0
    for page in ("results", "cape", "lff", "krpe", "graph", "relative", "search"):
        html = (built_site / f"{page}.html").read_text(encoding="utf-8")
        sections = re.findall(r"<details\b.*?</details>", html, flags=re.DOTALL)
        assert sections, f"{page}.html has no collapsed section: this test no longer reads it"
        for section in sections:
            assert "<summary>" in section, page
            assert "|---|" not in section and not re.search(r"^\s*\*\*[^*]+\*\*", _text(section), re.MULTILINE), \
                f"{page}.html shows the Markdown of a collapsed section as text"
            checked += "<table>" in section
    assert checked >= 7
