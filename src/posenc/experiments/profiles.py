"""How many seeds and steps each profile of each section runs: data, not code.

``profiles.toml`` (beside this module) holds, per section and profile, the numbers a section's
``plan(profile, seeds)`` reads: seeds, training steps, the variants of the quick profile. They
decide *which* jobs run, never *what* a job computes: a job's result is a function of its config
and of the code its function runs, and the job store keys records on both (the config's digest,
and :func:`posenc.report.provenance.source_digest` of the code). Keeping the plan's numbers out
of the code means that planning more seeds or a longer quick profile leaves every stored record
of unchanged configs valid, as it should: the quick profile can be planned from a full profile's
recorded spread without recomputing the full profile.
"""

from __future__ import annotations

import functools
import tomllib
from importlib import resources
from typing import Any

__all__ = ["profile_settings"]

_FILE = "profiles.toml"


@functools.cache
def _table() -> dict[str, Any]:
    text = resources.files("posenc.experiments").joinpath(_FILE).read_text(encoding="utf-8")
    return tomllib.loads(text)


def profile_settings(section: str, profile: str) -> dict[str, Any]:
    """The settings of ``section``'s ``profile`` (a fresh copy: callers may not change the table).

    Raises:
        ValueError: ``profile`` (or ``section``) has no table in ``profiles.toml``; the message
            lists the profiles the section has.
    """
    table = _table()
    if section not in table:
        raise ValueError(f"section must be one of {', '.join(sorted(table))}, got {section!r}")
    if profile not in table[section]:
        raise ValueError(f"profile must be one of {', '.join(map(repr, table[section]))}, got {profile!r}")
    import copy

    return copy.deepcopy(table[section][profile])
