"""A Griffe extension for the API site: docstrings as the site's renderer reads them.

posenc's docstrings are Google style with Sphinx cross-reference roles in the text
(``:class:`~posenc.attention.RelativeMHA```, ``:func:`grid```, ...), and some ``Args``
entries name several parameters at once (``device, dtype: ...``, ``steps / epochs: ...``).
mkdocstrings prints a role as literal text, and a grouped entry as one parameter that is
not in the signature, with Default "required". This extension converts both when the site
is built (``mkdocs.yml``: ``extensions``), leaving the source as it is:

* a role becomes a cross-reference to the object it names, resolved as Sphinx resolves it
  (``~`` shows the last component; a name without a module is looked up in the
  docstring's class, then its module and the packages above, then under ``posenc``).
  The reference is optional: a target the site does not document (a private helper, a
  torch object) renders as code text, never as a broken link;
* a grouped entry becomes one entry per name with the same description, so each shows
  its own annotation and the default from the signature.

:func:`convert_roles` and :func:`split_grouped_entries` are pure functions of the text
(``tests/test_site.py`` tests them and the built site).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import griffe

#: A Sphinx role: ``:role:`target``` or ``:role:`title <target>```, with an optional ``py:`` domain.
ROLE = re.compile(r"(?<![\w`]):(?:py:)?(?P<role>[a-z]+):`(?P<body>[^`\n]+)`")

#: Google section headers whose entries are parameters.
PARAMETER_SECTIONS = ("args", "arguments", "params", "parameters", "keyword args", "keyword arguments",
                      "other parameters", "other args")

_NAME = r"\*{0,2}[A-Za-z_]\w*"
_NAMES = rf"{_NAME}(?:\s*[,/]\s*{_NAME})*"
#: An entry's first line: names, an optional ``(type)``, a colon, the description.
_ENTRY = re.compile(rf"^(?P<names>{_NAMES})(?P<type>\s*\([^)]*\))?\s*:(?P<rest>.*)$")
#: A first line that only lists names and ends with a comma: the list goes on on the next line.
_OPEN_LIST = re.compile(rf"^{_NAMES}\s*,\s*$")


def _display(target: str, title: str | None) -> tuple[str, str]:
    """``(target without ~ / !, the text to show)`` of a role's body."""
    if title is not None:
        return target.lstrip("~!."), title
    shown = target.lstrip("!")
    if shown.startswith("~"):
        shown = shown[1:].rsplit(".", 1)[-1]
    return target.lstrip("~!").lstrip("."), shown.lstrip(".")


def convert_roles(text: str, resolve: Callable[[str], str | None]) -> str:
    """Every Sphinx role in ``text`` as an optional cross-reference (or code when unresolved).

    Args:
        text: a docstring (Markdown with Sphinx roles).
        resolve: a role's target (without ``~``) -> the full path of the object it names,
            or ``None`` when it names nothing known.

    Returns:
        the text with ``<autoref identifier="PATH" optional>`TITLE`</autoref>`` for each
        resolved role (mkdocs-autorefs turns it into a link, or into code text when the site
        has no such object) and ```TITLE``` for the rest.
    """

    def replace(m: re.Match) -> str:
        body = m.group("body").strip()
        explicit = re.fullmatch(r"(?P<title>.*?)\s*<(?P<target>[^<>]+)>", body)
        target, title = _display(explicit["target"], explicit["title"]) if explicit else _display(body, None)
        code = f"`{title}`"
        if body.lstrip("~").startswith("!"):  # Sphinx: "!" suppresses the link
            return code
        path = resolve(target)
        return code if path is None else f'<autoref identifier="{path}" optional>{code}</autoref>'

    return ROLE.sub(replace, text)


def split_grouped_entries(text: str) -> str:
    """Google ``Args`` entries that name several parameters, as one entry per name.

    ``device, dtype: of the buffers.`` becomes ``device: of the buffers.`` and
    ``dtype: of the buffers.``; ``/`` separates names too (``steps / epochs: ...``), and a
    list of names may go on on the next line when the first ends with a comma. The
    description (and its continuation lines) is repeated for each name; an optional
    ``(type)`` after the names is kept on each. Other sections are left as they are.
    """
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if line.strip().rstrip(":").lower() not in PARAMETER_SECTIONS or not line.rstrip().endswith(":"):
            continue
        header = len(line) - len(line.lstrip())
        indent = None
        while i < len(lines):
            cur = lines[i]
            if not cur.strip():
                out.append(cur)
                i += 1
                continue
            level = len(cur) - len(cur.lstrip())
            if level <= header:
                break  # end of the section
            if indent is None:
                indent = level
            if level != indent:  # a continuation line outside a grouped entry: as it is
                out.append(cur)
                i += 1
                continue
            head = cur.strip()
            j = i + 1
            if _OPEN_LIST.match(head) and j < len(lines) and len(lines[j]) - len(lines[j].lstrip()) == indent:
                head = f"{head} {lines[j].strip()}"  # "a, b, c,\n d, e: text"
                j += 1
            m = _ENTRY.match(head)
            if m is None or not re.search(r"[,/]", m["names"]):
                out.append(cur)
                i += 1
                continue
            body = []  # the entry's continuation lines (deeper than the entry) and blank lines
            while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
                body.append(lines[j])
                j += 1
            while body and not body[-1].strip():
                j -= 1  # a trailing blank line belongs after the section's entries
                body.pop()
            pad = " " * indent
            for name in re.split(r"\s*[,/]\s*", m["names"]):
                out.append(f"{pad}{name}{m['type'] or ''}:{m['rest']}")
                out.extend(body)
            i = j
    return "\n".join(out)


def _member(scope: griffe.Object | griffe.Alias, dotted: str) -> griffe.Object | griffe.Alias | None:
    cur = scope
    for part in dotted.split("."):
        try:
            cur = cur.members[part]
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
    return cur


def _canonical(obj: griffe.Object | griffe.Alias) -> str | None:
    try:
        return obj.canonical_path
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def resolver(obj: griffe.Object, collection: griffe.ModulesCollection, root: str) -> Callable[[str], str | None]:
    """The role resolver of a docstring on ``obj``: its class, module and parent packages, then ``root``."""
    scopes = []
    cur: griffe.Object | None = obj if (obj.is_class or obj.is_module) else obj.parent
    while cur is not None:
        scopes.append(cur)
        cur = cur.parent

    def resolve(target: str) -> str | None:
        for scope in scopes:
            found = _member(scope, target)
            if found is not None:
                return _canonical(found)
        for full in (target, f"{root}.{target}"):
            head, _, rest = full.partition(".")
            if head in collection.members:
                found = _member(collection.members[head], rest) if rest else collection.members[head]
                if found is not None:
                    return _canonical(found)
        return None

    return resolve


def _objects(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


class SiteDocstrings(griffe.Extension):
    """Converts Sphinx roles and grouped ``Args`` entries in every docstring of a loaded package."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        for obj in _objects(pkg):
            doc = obj.docstring
            if doc is None:
                continue
            text = convert_roles(doc.value, resolver(obj, loader.modules_collection, pkg.name))
            if obj.is_function or obj.is_class:
                text = split_grouped_entries(text)
            doc.value = text
