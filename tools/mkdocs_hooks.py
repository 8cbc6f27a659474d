"""mkdocs hooks of the API site (``mkdocs.yml``: ``hooks``): a site that works opened from disk.

posenc has no published site, so ``mkdocs.yml`` sets no ``site_url`` and the pages link to
each other by relative ``.html`` paths (``use_directory_urls: false``). Two things remain:

* a sitemap needs absolute URLs, and without ``site_url`` mkdocs writes one of bare paths:
  :func:`on_post_build` removes ``sitemap.xml`` and ``sitemap.xml.gz`` rather than ship it;
* the guides and the results page keep earlier results and full reports in collapsed
  ``<details>`` sections written in Markdown, which GitHub renders but Python-Markdown leaves as
  raw text: :func:`on_page_markdown` marks each ``<details>`` with ``markdown="1"`` so that
  ``md_in_html`` renders its tables and lists;
* the theme's search runs in a web worker that a page opened from ``file://`` may not start,
  and then says "Initializing search" forever: :func:`on_post_page` adds a script that, only
  on a ``file://`` page, says instead that search needs the site served over HTTP and how
  (``python -m http.server``, or ``mkdocs serve`` from the source).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

#: The text shown in the search box and its result area on a page opened from disk.
FILE_SEARCH_NOTE = ("Search needs the site served over HTTP: run python -m http.server -d site "
                    "(or mkdocs serve in the source) and open http://localhost:8000")

#: Inserted before ``</body>`` of every page (no network, no external script).
FILE_SEARCH_SCRIPT = """<script>
(function () {
  if (window.location.protocol !== "file:") return;
  var note = %s;
  function tell() {
    document.querySelectorAll(".md-search__input").forEach(function (input) {
      input.placeholder = "Search needs a web server";
      input.title = note;
    });
    document.querySelectorAll(".md-search-result__meta").forEach(function (meta) {
      meta.textContent = note;
    });
  }
  document.addEventListener("DOMContentLoaded", tell);
  document.addEventListener("focusin", tell);
  document.addEventListener("input", function () { setTimeout(tell, 0); });
})();
</script>""" % json.dumps(FILE_SEARCH_NOTE)


#: A ``<details>`` opening tag without attributes, at the start of a line.
_DETAILS = re.compile(r"^<details>", re.MULTILINE)


def on_page_markdown(markdown: str, *, page, config, files) -> str:
    """Let ``md_in_html`` render the Markdown inside each ``<details>`` section."""
    return _DETAILS.sub('<details markdown="1">', markdown)


def on_post_page(output: str, *, page, config) -> str:
    """Add :data:`FILE_SEARCH_SCRIPT` to the page."""
    head, sep, tail = output.rpartition("</body>")
    return f"{head}{FILE_SEARCH_SCRIPT}\n{sep}{tail}" if sep else output


def on_post_build(*, config) -> None:
    """Remove the sitemap when there is no ``site_url`` to make its URLs absolute."""
    if config.get("site_url"):
        return
    for name in ("sitemap.xml", "sitemap.xml.gz"):
        (Path(config["site_dir"]) / name).unlink(missing_ok=True)
