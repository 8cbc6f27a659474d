"""choose_encoding refusals (issue #40, part 5, and the race's memory from part 6): a refused call
leaves the model as it was (weights, alpha, decisions, gradients), inputs the model cannot run on are
reported naming train or val, a model on the meta device is refused, and the race checks its copies
against the library's memory limit before making the first."""

import copy

import pytest
import torch
from torch import nn

from posenc._resources import LIMIT_ENV
from posenc.search import CHOICE_SELECTORS, EncodingSearch, choose_encoding
from posenc.search import choose as choose_module

N, F = 6, 3
RECIPE = dict(steps=8, batch_size=16, lr=1e-2)


class SeqNet(nn.Module):
    """Tokens (B, 6, 3) -> 3 classes (as in test_choose.py); ``ballast`` adds unused parameters."""

    def __init__(self, ballast: int = 0):
        super().__init__()
        self.embed = nn.Linear(F, 16)
        self.pos = EncodingSearch(16, N, ("none", "sinusoidal", "learned_table"))
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(16 * N, 3)
        if ballast:
            self.ballast = nn.Parameter(torch.zeros(ballast))

    def forward(self, x):
        return self.head(self.drop(torch.tanh(self.pos(self.embed(x)))).flatten(1))


class EncodingFirst(nn.Module):
    """A model whose first layer is the EncodingSearch (its own check words the error as ``x must be ...``)."""

    def __init__(self):
        super().__init__()
        self.pos = EncodingSearch(F, N, ("none", "learned_table"))
        self.head = nn.Linear(F * N, 3)

    def forward(self, x):
        return self.head(self.pos(x).flatten(1))


def task(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, N, F, generator=g) * 0.1
    y = torch.randint(0, 3, (n,), generator=g)
    x[torch.arange(n), 2 * y + torch.randint(0, 2, (n,), generator=g)] += 1.0
    return x, y


TRAIN, VAL = task(64, 0), task(48, 1)


def _snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}


def _assert_unchanged(model, before, training=True):
    after = model.state_dict()
    for k, v in before.items():
        assert torch.equal(v, after[k]), k
    assert all(p.grad is None for p in model.parameters())
    assert model.pos.undecided and model.pos.decided_by is None
    assert model.training is training


def _bad_batch(kind):
    """Four training batches, the third one bad."""
    x, y = TRAIN
    batches = [(x[i:i + 16].clone(), y[i:i + 16].clone()) for i in range(0, 64, 16)]
    bx, by = batches[2]
    if kind == "nan":
        bx[3, 1, 0] = float("nan")
    elif kind == "label":
        by[5] = 7
    elif kind == "shape":
        by = by[:, None]
    elif kind == "meta":
        bx = bx.to("meta")
    batches[2] = (bx, by)
    return batches


@pytest.mark.parametrize("selector", CHOICE_SELECTORS)
@pytest.mark.parametrize("kind", ["nan", "label", "shape", "meta"])
def test_a_bad_batch_mid_training_leaves_the_model_as_it_was(selector, kind):
    torch.manual_seed(0)
    model = SeqNet()
    before = _snapshot(model)
    match = {"nan": r"train \(batch 2\): inputs must be finite", "label": r"train: targets must be class indices",
             "shape": r"train: targets must have shape \(16,\)",
             "meta": r"train \(batch 2\): inputs are on the meta device"}[kind]
    with pytest.raises(ValueError, match=match):
        choose_encoding(model, _bad_batch(kind), VAL, selector=selector, **RECIPE)
    _assert_unchanged(model, before)


@pytest.mark.parametrize("selector", ["pt", "magnitude"])
def test_a_divergence_or_a_bad_validation_batch_leaves_the_supernet_as_it_was(selector):
    torch.manual_seed(0)
    model = SeqNet().eval()
    before = _snapshot(model)
    vx, vy = VAL
    val = [(vx[:16], vy[:16]), (vx[16:32], vy[16:32].clone().fill_(9))]
    with pytest.raises(ValueError, match=r"val: targets must be class indices in \[0, 2\]"):
        choose_encoding(model, TRAIN, val, selector=selector, **RECIPE)
    _assert_unchanged(model, before, training=False)
    with pytest.raises(FloatingPointError, match="diverged"):
        choose_encoding(model, TRAIN, VAL, selector=selector, steps=8, batch_size=16, lr=1e30, optimizer="sgd")
    _assert_unchanged(model, before, training=False)


@pytest.mark.parametrize("selector", CHOICE_SELECTORS)
def test_inputs_the_model_cannot_run_on_are_named(selector):
    x, y = TRAIN
    cases = [
        (SeqNet, (x.long(), y), VAL, TypeError, r"^train: the model cannot run on its inputs \(batch 0's inputs: "
                                                r"shape \(16, 6, 3\), torch.int64, on cpu\): its parameters are "
                                                r"torch.float32; give floating-point inputs"),
        (SeqNet, (x.half(), y), VAL, TypeError, r"^train: .*torch.float16.*convert the inputs \(.to\(torch.float32\)\) "
                                                r"or the model \(model.to\(torch.float16\)\)"),
        (SeqNet, TRAIN, (VAL[0].double(), VAL[1]), TypeError, r"^val: the model cannot run on its inputs"),
        (EncodingFirst, (x.long(), y), VAL, TypeError, r"^train: .*torch.int64.*x must be a floating-point tensor"),
        (SeqNet, (x[:, :5], y), VAL, ValueError, r"^train: the model refused its inputs \(batch 0's inputs: shape "
                                                 r"\(16, 5, 3\), torch.float32, on cpu\): x must have shape"),
    ]
    for make, train, val, error, match in cases:
        torch.manual_seed(0)
        model = make()
        before = _snapshot(model)
        with pytest.raises(error, match=match):
            choose_encoding(model, train, val, selector=selector, **RECIPE)
        for k, v in before.items():
            assert torch.equal(v, model.state_dict()[k]), k


def test_a_model_on_the_meta_device_is_refused():
    with torch.device("meta"):
        model = SeqNet()
    for selector in CHOICE_SELECTORS:
        with pytest.raises(ValueError, match=r"model has 7 parameter\(s\) or buffer\(s\) on the meta device .*"
                                             r"'embed.weight'.*materialise it"):
            choose_encoding(model, TRAIN, VAL, selector=selector, **RECIPE)


def test_the_race_checks_its_copies_against_the_memory_limit_before_copying(monkeypatch):
    # 3 candidates x (8M float32 weights, their gradients and AdamW's two moments: 128 MiB) = 384 MiB
    torch.manual_seed(0)
    model = SeqNet(ballast=8 * 2**20)
    before = _snapshot(model)
    copies = []
    real_deepcopy = copy.deepcopy

    def counted(obj, memo=None):
        copies.append(type(obj).__name__)
        raise AssertionError("the model was copied before the memory check")

    monkeypatch.setenv(LIMIT_ENV, "200M")
    monkeypatch.setattr(choose_module.copy, "deepcopy", counted)
    with pytest.raises(MemoryError, match=r"the race's 3 trained copies of the model \(128 MiB each.*\) would need "
                                          r"about 384 MiB of memory \(candidates=3\), more than the limit of 200 MiB"):
        choose_encoding(model, TRAIN, VAL, selector="race", **RECIPE)
    with pytest.raises(ValueError, match="candidates=3"):  # a ValueError too
        choose_encoding(model, TRAIN, VAL, selector="race", **RECIPE)
    assert copies == []
    _assert_unchanged(model, before)
    monkeypatch.setattr(choose_module.copy, "deepcopy", real_deepcopy)
    monkeypatch.setenv(LIMIT_ENV, "1G")
    sel = choose_encoding(model, TRAIN, VAL, selector="race", **RECIPE)  # within the limit: it runs
    assert model.pos.chosen == sel.choices["pos"]


def test_the_trained_copy_of_pt_and_magnitude_is_checked_too(monkeypatch):
    # one copy: 24M float32 weights x (weights, gradients, AdamW's two moments) = 384 MiB
    model = SeqNet(ballast=24 * 2**20)
    monkeypatch.setenv(LIMIT_ENV, "300M")
    for selector in ("pt", "magnitude"):
        with pytest.raises(MemoryError, match=rf"choose_encoding\(selector='{selector}'\)'s trained copy of the "
                                              r"model .* 384 MiB .* more than the limit of 300 MiB"):
            choose_encoding(model, TRAIN, VAL, selector=selector, **RECIPE)
    assert model.pos.undecided


@pytest.mark.parametrize("selector", CHOICE_SELECTORS)
def test_the_result_is_written_in_place_and_other_decisions_keep_their_author(selector):
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
    model.a.discretize("sinusoidal", by="my_rule()")
    weight, before = model.head.weight, model.head.weight.detach().clone()
    sel = choose_encoding(model, TRAIN, VAL, selector=selector, **RECIPE)
    assert model.a.decided_by == "my_rule()" and model.a.chosen == "sinusoidal"
    assert model.b.chosen == sel.choices["b"] and model.b.decided_by == f"choose_encoding(selector={selector!r})"
    assert model.head.weight is weight and not torch.equal(weight, before)  # trained, in the user's tensor
