"""choose_encoding: the race leaves the model exactly as a stand-alone training would, PT keep-one scores
'none' as the supernet with every encoding masked, magnitude keeps the largest alpha, costs stay within
the budget, and bad input fails naming the argument."""

import copy

import pytest
import torch
from torch import nn

from posenc.search import (
    CHOICE_SELECTORS,
    EncodingSearch,
    MixedOp,
    Zero,
    apply_selection,
    choose_encoding,
    evaluate,
    magnitude_select,
    mixed_ops,
    race_plan,
    train_network,
)
from posenc.search.choose import HOLD_LIMIT, _better

N, F = 6, 3


class SeqNet(nn.Module):
    """Tokens (B, 6, 3) -> 3 classes; dropout on, so the race must keep each candidate's RNG apart."""

    def __init__(self, candidates=("none", "sinusoidal", "learned_table")):
        super().__init__()
        self.embed = nn.Linear(F, 16)
        self.pos = EncodingSearch(16, N, candidates)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(16 * N, 3)

    def forward(self, x):
        return self.head(self.drop(torch.tanh(self.pos(self.embed(x)))).flatten(1))


def task(n, seed):
    """The class is where the largest token sits (positions 0-1, 2-3 or 4-5): position matters."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, N, F, generator=g) * 0.1
    y = torch.randint(0, 3, (n,), generator=g)
    x[torch.arange(n), 2 * y + torch.randint(0, 2, (n,), generator=g)] += 1.0
    return x, y


TRAIN, VAL = task(96, 0), task(48, 1)
RECIPE = dict(steps=12, batch_size=16, lr=1e-2)


def fresh(seed=0, **kw):
    torch.manual_seed(seed)
    return SeqNet(**kw)


def test_race_returns_the_winner_trained_exactly_as_alone():
    model = fresh()
    sel = choose_encoding(model, TRAIN, VAL, selector="race", seed=3, **RECIPE)
    choice = sel.choices["pos"]
    ref = fresh()
    mixed_ops(ref)["pos"].discretize(choice)
    train_network(ref, TRAIN, seed=3, optimizer="adamw", lr_min=1e-5, weight_decay=0.05, **RECIPE)
    for (k, a), b in zip(ref.state_dict().items(), model.state_dict().values()):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), k
    assert model.pos.chosen == choice and "choose_encoding" in model.pos.decided_by
    # 3 candidates, budget 2: rungs keep 2 then 1; the last rung trains the winner to the end
    rungs = [d["steps"] for d in sel.decisions]
    assert rungs[-1] == 12 and len(rungs) == 3 and rungs == sorted(rungs)
    assert sel.candidates["pos"][choice]["steps_trained"] == 12
    held = any(d["held"] for d in sel.decisions)  # a rung where no candidate had learned: its cut held
    assert sel.cost["steps"] <= (HOLD_LIMIT if held else 1.0) * 2.0 * 12 + 1e-9
    assert sel.cost["ratio"] == sel.cost["steps"] / 12


def test_race_plan_fills_the_budget():
    assert race_plan(4, 240, 2.0, 0.0) == [(4, 60), (2, 120), (1, 240)]
    for k, budget, ev in [(4, 2.0, 1.0), (3, 1.5, 0.5), (8, 3.0, 0.2), (1, 1.2, 0.1), (5, 10.0, 0.0)]:
        plan = race_plan(k, 100, budget, ev)
        spent, before = 0.0, 0
        for n, s in plan:
            spent += n * (s - before) + n * ev
            before = s
        assert plan[0][0] == k and plan[-1] == (1, 100) and spent <= budget * 100 + 1e-9
    assert race_plan(4, 100, 10.0, 0.0)[0] == (4, 100)  # a large budget trains every candidate fully
    with pytest.raises(ValueError, match="budget=1.0 is too small for selector 'race'"):
        race_plan(4, 100, 1.0, 0.0)


def test_pt_scores_none_as_the_supernet_without_encoding():
    model = fresh()
    sel = choose_encoding(model, TRAIN, VAL, selector="pt", seed=0, **RECIPE)
    scores = sel.candidates["pos"]
    assert set(scores) == {"none", "sinusoidal", "learned_table"}
    # reference: the trained supernet with every encoding masked is the model without position encoding
    sup = copy.deepcopy(model)
    sup.pos.clear_selection()
    with sup.pos.masked("none", "sinusoidal", "learned_table"):
        ref_loss, ref_acc = evaluate(sup, VAL)
    assert scores["none"]["val_loss"] == pytest.approx(ref_loss, abs=1e-6)
    assert scores["none"]["val_accuracy"] == pytest.approx(ref_acc)
    # keep-one: the other candidates masked, the kept one at its supernet weight (no renormalisation)
    with sup.pos.masked("none", "sinusoidal"):
        assert scores["learned_table"]["val_loss"] == pytest.approx(evaluate(sup, VAL)[0], abs=1e-6)
    best = max(scores, key=lambda c: (scores[c]["val_accuracy"], -scores[c]["val_loss"]))
    assert sel.choices["pos"] == best == model.pos.chosen
    assert 0 < scores[best]["uncertainty"] < 0.5 and sel.cost["ratio"] <= 2.0


def test_ties_are_broken_by_validation_loss():
    a, b = {"accuracy": 1.0, "loss": 0.2}, {"accuracy": 1.0, "loss": 0.1}
    assert _better(b, a, "accuracy") and not _better(a, b, "accuracy")
    assert _better({"accuracy": 0.9, "loss": 9.0}, b, "accuracy") is False
    assert _better(a, {"accuracy": 0.5, "loss": 0.0}, "accuracy")
    assert _better(b, a, "loss") and _better(a, None, "loss")


def test_magnitude_keeps_the_largest_alpha_and_every_selector_stays_in_budget():
    model = fresh()
    sel = choose_encoding(model, TRAIN, VAL, selector="magnitude", seed=0, budget=1.0, **RECIPE)
    w = sel.candidates["pos"]
    assert sel.choices["pos"] == max(w, key=lambda c: w[c]["score"])
    assert sum(v["score"] for v in w.values()) == pytest.approx(1.0)
    assert sel.decisions[0]["supernet_steps"] == 6 and sel.cost["steps"] == 12  # an alpha and a weight pass per step
    for s in CHOICE_SELECTORS:
        m = fresh()
        out = choose_encoding(m, TRAIN, VAL, selector=s, budget=2.5, **RECIPE)
        held = any(d.get("held") for d in out.decisions)
        assert out.cost["steps"] <= (HOLD_LIMIT if held else 1.0) * 2.5 * 12 + 1e-9
        assert out.method == f"choose_encoding:{s}"
        plain = apply_selection(m)
        assert not any(isinstance(x, MixedOp) for x in plain.modules())
        assert out.to_dict()["cost"]["standalone_steps"] == 12


def test_two_encoding_layers_race_over_joint_candidates():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(F, 8)
            self.a = EncodingSearch(8, N, ["none", "sinusoidal"])
            self.b = EncodingSearch(8, N, ["none", "learned_table"])
            self.head = nn.Linear(8 * N, 3)

        def forward(self, x):
            return self.head(self.b(self.a(self.embed(x))).flatten(1))

    torch.manual_seed(0)
    model = Two()
    sel = choose_encoding(model, TRAIN, VAL, selector="race", **RECIPE)
    assert list(sel.candidates) == ["a|b"] and len(sel.candidates["a|b"]) == 4
    assert set(sel.choices) == {"a", "b"} and model.a.chosen == sel.choices["a"]
    torch.manual_seed(0)
    sel = choose_encoding(Two(), TRAIN, VAL, selector="pt", **RECIPE)
    assert set(sel.candidates) == {"a", "b"}


def test_bad_input():
    plain = nn.Sequential(MixedOp({"a": nn.Identity()}), nn.Linear(3, 3))
    plain[0].discretize("a")
    with pytest.raises(ValueError, match="no EncodingSearch"):
        choose_encoding(plain, TRAIN, VAL, steps=1)
    with pytest.raises(ValueError, match="no mixed edges"):
        choose_encoding(nn.Linear(3, 3), TRAIN, VAL, steps=1)

    class Other(SeqNet):
        def __init__(self):
            super().__init__()
            self.extra = MixedOp({"none": Zero(), "id": nn.Identity()})

    with pytest.raises(ValueError, match="EncodingSearch layers only.*extra"):
        choose_encoding(Other(), TRAIN, VAL, steps=1)
    decided = fresh()
    magnitude_select(decided)
    with pytest.raises(ValueError, match=r"'pos' \(discretised to .* by magnitude_select\(\)\) is already decided"):
        choose_encoding(decided, TRAIN, VAL, steps=1)
    with pytest.raises(TypeError, match="unknown recipe keywords \\['w_lr'\\]"):
        choose_encoding(fresh(), TRAIN, VAL, steps=1, w_lr=0.1)
    with pytest.raises(ValueError, match="epochs= or steps="):
        choose_encoding(fresh(), TRAIN, VAL)
    with pytest.raises(ValueError, match="budget must be finite and > 0"):
        choose_encoding(fresh(), TRAIN, VAL, steps=4, budget=0)
    with pytest.raises(ValueError, match="selector must be one of"):
        choose_encoding(fresh(), TRAIN, VAL, steps=4, selector="best")
    with pytest.raises(ValueError, match="too small for selector 'race'"):
        choose_encoding(fresh(), TRAIN, VAL, steps=4, budget=1.0)
    with pytest.raises(ValueError, match="seed must be an int in"):
        choose_encoding(fresh(), TRAIN, VAL, steps=4, seed=2**70)
    with pytest.raises(ValueError, match=r"val: targets must be class indices in \[0, 2\]"):
        choose_encoding(fresh(), TRAIN, (VAL[0], VAL[1] + 5), steps=4)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        choose_encoding(fresh(), TRAIN, VAL, steps=4, optimizer="lbfgs")
