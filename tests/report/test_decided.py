"""Counting the claims a run decided."""

from __future__ import annotations

from posenc.report.decided import claim_comparisons, comparison_verdict, count_decided


def test_counts_claims_whose_every_comparison_holds_or_is_contradicted():
    summaries = {
        "a": {"claims": {
            "check": {"holds": False},                                   # a single check: decided (no)
            "one": {"verdict": "holds", "mean": 0.1},                     # one comparison
            "many": {"verdict": "holds in 1 of 2", "comparisons": [{"verdict": "holds"},
                                                                  {"verdict": "not decided"}]},
        }},
        "b": {"claims": {
            "vs": {"verdict": "...", "vs": {"x": {"verdict": "contradicted"}, "y": {"verdict": "holds"}}},
            "weak": {"verdict": "not confirmed at this scale"},
        }},
        "empty": {"claims": {}},
    }
    c = count_decided(summaries)
    assert (c["claims"], c["claims_decided"]) == (5, 3)
    assert (c["comparisons"], c["comparisons_decided"]) == (7, 5)
    assert c["undecided"] == ["a/many", "b/weak"]
    assert c["by_section"]["a"] == {"claims": 3, "claims_decided": 2, "comparisons": 4, "comparisons_decided": 3}
    assert c["by_section"]["empty"]["claims"] == 0


def test_odd_records_count_as_undecided_not_as_errors():
    assert comparison_verdict("x") == "n/a" and comparison_verdict({"holds": "yes"}) == "n/a"
    assert claim_comparisons({"comparisons": "no list"}) == [{"comparisons": "no list"}]
    c = count_decided({"s": {"claims": {"bad": 3}}, "t": "not a summary"})
    assert c["claims"] == 1 and c["claims_decided"] == 0 and c["undecided"] == ["s/bad"]
