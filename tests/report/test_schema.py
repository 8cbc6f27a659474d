"""The result-schema language of posenc.report.schema."""

import pytest

from posenc.report.schema import check, check_spec

SPEC = {"variant": str, "seed": int, "accuracy": {str: float}, "curve": [[float]], "converged": bool,
        "note?": str, "p": (float, None), "extra": object}
GOOD = {"variant": "cape", "seed": 0, "accuracy": {"16": 0.9, "32": 1}, "curve": [[0, 0.5], [10, 0.75]],
        "converged": True, "p": None, "extra": [1, "x"]}


def test_a_matching_value_passes_and_extra_keys_are_allowed():
    assert check(GOOD, SPEC) is None
    assert check({**GOOD, "note": "x", "more": 3}, SPEC) is None
    check_spec(SPEC)


@pytest.mark.parametrize("change, where", [
    ({"seed": "0"}, "result['seed'] is not an integer"),
    ({"seed": True}, "result['seed'] is not an integer"),
    ({"seed": 1.5}, "result['seed'] is not an integer"),
    ({"converged": 1}, "result['converged'] is not a bool"),
    ({"accuracy": {"16": "0.9"}}, "result['accuracy']['16'] is not a number"),
    ({"accuracy": [0.9]}, "result['accuracy'] is not an object"),
    ({"curve": [[0, None]]}, "result['curve'][0][1] is not a number"),
    ({"curve": {"0": 1}}, "result['curve'] is not a list"),
    ({"p": "small"}, "result['p'] is not a number or null"),
    ({"note": 3}, "result['note'] is not a string"),
    ({"accuracy": {"16": True}}, "is not a number"),
])
def test_each_wrong_type_is_named_where_it_is(change, where):
    assert where in check({**GOOD, **change}, SPEC)


def test_a_missing_required_key_is_named():
    value = dict(GOOD)
    del value["seed"]
    assert check(value, SPEC) == "result has no 'seed'"
    assert check("x", SPEC).startswith("result is not an object")


@pytest.mark.parametrize("bad", [[int, str], (), {str: int, "a": int}, {3: int}, list, 3])
def test_malformed_specs_are_refused(bad):
    with pytest.raises(TypeError):
        check_spec(bad)
