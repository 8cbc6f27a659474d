"""The registered reproduction sections, loaded lazily by name.

Each entry maps a section name to ``"module:attribute"`` holding a
:class:`~posenc.report.section.Section`; a new section adds one line here.
"""

from __future__ import annotations

import importlib

from posenc.report.section import Section

SECTIONS: dict[str, str] = {
    "coords": "posenc.report.coords:SECTION",
    "lff": "posenc.report.lff:SECTION",
    "krpe": "posenc.report.krpe:SECTION",
    "gir": "posenc.report.gir:SECTION",
    "relative": "posenc.report.relative:SECTION",
    "cape": "posenc.report.cape:SECTION",
    "search": "posenc.report.search:SECTION",
}


def available_sections() -> list[str]:
    return list(SECTIONS)


def get_section(name: str) -> Section:
    if name not in SECTIONS:
        raise ValueError(f"unknown section {name!r}; available: {', '.join(SECTIONS)}")
    module, _, attr = SECTIONS[name].partition(":")
    return getattr(importlib.import_module(module), attr)
