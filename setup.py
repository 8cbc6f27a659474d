"""The package's long description: README.md with its relative links as plain text.

Everything else is in pyproject.toml. README.md links to the guides by relative paths
(``[timm guide](docs/timm.md)``), which work in a clone and on any forge; a package index
page shows the README without the files around it, where such a link is dead. There is no
published URL to point them at, so the long description names each file instead
(``timm guide (`docs/timm.md`)``), and says that these files are in the source archive.
"""

from __future__ import annotations

import re
from pathlib import Path

#: A Markdown link or image, ``[text](target)`` / ``![alt](target)``, and its optional title.
LINK = re.compile(r"(?P<image>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")

#: Said under the title of the long description when it names files.
FILES_NOTE = ("> The files named in this description (`docs/...`, `CHANGELOG.md`, ...) are in posenc's "
              "source: the repository and the source archive (`posenc-<version>.tar.gz`).")


def _relative(target: str) -> bool:
    return not re.match(r"^([a-z][a-z0-9+.-]*:|#|//)", target, flags=re.IGNORECASE)


def index_description(readme: str) -> str:
    """``readme`` for a package index page: every relative link or image as plain text.

    ``[text](path)`` becomes ``text (`path`)`` (just ```path``` when the text is the path or
    the file's name without its suffix),
    a relative image its alt text; absolute links (``https://...``) and in-page anchors are
    kept. Text inside code spans and fenced blocks is left alone. :data:`FILES_NOTE` follows
    the first heading when anything was rewritten.
    """
    changed = False

    def plain(m: re.Match) -> str:
        nonlocal changed
        text, target = m["text"], m["target"]
        if not _relative(target):
            return m.group(0)
        changed = True
        if m["image"]:
            return text
        if text.strip("`") in (target, Path(target.split("#")[0]).stem):  # [coords](docs/coords.md)
            return f"`{target}`"
        return f"{text} (`{target}`)"

    # odd items: fenced blocks and code spans, left as they are
    parts = re.split(r"(^\s*```.*?^\s*```[^\n]*$|`[^`\n]*`)", readme, flags=re.DOTALL | re.MULTILINE)
    for i in range(0, len(parts), 2):
        parts[i] = LINK.sub(plain, parts[i])
    out = "".join(parts)
    if changed:
        title = re.search(r"^# .*$", out, flags=re.MULTILINE)
        at = title.end() if title else 0
        out = f"{out[:at]}\n\n{FILES_NOTE}{out[at:]}" if title else f"{FILES_NOTE}\n\n{out}"
    return out


if __name__ == "__main__":  # run by the build backend
    from setuptools import setup

    here = Path(__file__).resolve().parent
    setup(long_description=index_description((here / "README.md").read_text(encoding="utf-8")),
          long_description_content_type="text/markdown")
