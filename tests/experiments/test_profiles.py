"""profiles.toml: the numbers every section's plan reads, and their loader."""

from __future__ import annotations

import pytest

from posenc.experiments.profiles import profile_settings
from posenc.report.registry import available_sections, get_section

PLANNED_FROM_TOML = ("krpe", "relative", "gir", "lff", "cape", "search")


@pytest.mark.parametrize("section", PLANNED_FROM_TOML)
def test_every_section_has_a_quick_and_a_full_profile(section):
    for profile in ("quick", "full"):
        settings = profile_settings(section, profile)
        assert isinstance(settings, dict) and settings
        jobs = get_section(section).plan(profile, None)
        assert jobs and len({j.key for j in jobs}) == len(jobs)


def test_settings_are_a_copy_and_bad_names_are_refused():
    a = profile_settings("cape", "quick")
    a["seeds"] = 10**6
    assert profile_settings("cape", "quick")["seeds"] != 10**6
    with pytest.raises(ValueError, match="profile must be one of 'quick', 'full', got 'medium'"):
        profile_settings("cape", "medium")
    with pytest.raises(ValueError, match="section must be one of"):
        profile_settings("nope", "quick")
    assert set(PLANNED_FROM_TOML) <= set(available_sections())


def test_the_quick_profile_trains_what_the_full_profile_trains_and_no_more():
    # the quick profile is a cut of the full one: never more seeds, steps or variants
    for section in ("cape", "lff"):
        q, f = profile_settings(section, "quick"), profile_settings(section, "full")
        assert q["seeds"] <= f["seeds"]
    q, f = profile_settings("krpe", "quick"), profile_settings("krpe", "full")
    assert all(q[t]["steps"] <= f[t]["steps"] and q[t]["seeds"] <= f[t]["seeds"] for t in q)
    cq, cf = profile_settings("cape", "quick"), profile_settings("cape", "full")
    assert set(cq["variants"]) <= set(cf["variants"]) and cq["steps"] <= cf["steps"]
