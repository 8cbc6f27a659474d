"""Encodings across families for a plain model (posenc.search.families) and choose_encoding's race over them:
the additive layer against a loop over positions, the attention swap keeps every projection, the race leaves
the winner exactly as a stand-alone training would, a refused call changes nothing, and bad input fails
naming the argument."""

import copy
import math

import pytest
import torch
from torch import nn

from posenc.attention import KernelizedMHA, RelativeMHA
from posenc.encodings import create_encoding
from posenc.search.choose import HOLD_LIMIT, LEARNED_MARGIN
from posenc.search import (
    ATTENTION_CANDIDATES,
    FAMILY_CANDIDATES,
    SequenceEncoding,
    choose_encoding,
    parse_candidate,
    train_network,
    with_encoding,
)

F, D, L = 3, 16, 6


class Plain(nn.Module):
    """Standard parts only: a linear embedding, an nn.Identity where positions go, nn.TransformerEncoder."""

    def __init__(self, batch_first=True, dropout=0.1, classes=3):
        super().__init__()
        self.batch_first = batch_first
        self.embed = nn.Linear(F, D)
        self.pos = nn.Identity()
        layer = nn.TransformerEncoderLayer(D, 2, 32, dropout=dropout, batch_first=batch_first)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(D, classes)

    def forward(self, x):
        h = self.embed(x)
        if not self.batch_first:
            h = h.transpose(0, 1)
        h = self.encoder(self.pos(h))
        if not self.batch_first:
            h = h.transpose(0, 1)
        return self.head(h.mean(1))


def task(n, seed, length=L, regression=False):
    """The class is where the largest token sits (first, middle or last third): position matters."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, length, F, generator=g) * 0.1
    y = torch.randint(0, 3, (n,), generator=g)
    third = length // 3
    x[torch.arange(n), third * y + torch.randint(0, third, (n,), generator=g)] += 1.0
    if regression:
        return x, y.float().unsqueeze(-1)
    return x, y


TRAIN, VAL = task(96, 0), task(48, 1)
RECIPE = dict(steps=12, batch_size=16, lr=1e-2)
BUDGET = 2.5  # 5 candidates: the shortest rung and 3 validation batches per candidate need more than 2
CANDS = ["none", "sinusoidal", "rope", "alibi", "rope+learned_table"]


def fresh(seed=0, **kw):
    torch.manual_seed(seed)
    return Plain(**kw)


def test_parse_candidate():
    assert parse_candidate("rope") == parse_candidate(" rope ").__class__("rope", "rope", "none")
    c = parse_candidate("t5+lff")
    assert (c.attention, c.additive, c.family) == ("t5", "lff", "combined")
    assert parse_candidate("cape").family == "augmented" and parse_candidate("kernelized").family == "kernelized"
    assert parse_candidate("alibi").family == "relative" and parse_candidate("none").family == "additive"
    assert set(FAMILY_CANDIDATES) <= set(ATTENTION_CANDIDATES) | {"none", "sinusoidal", "learned_table", "cape"}
    with pytest.raises(TypeError, match="candidates: each candidate must be a string"):
        parse_candidate(3)
    with pytest.raises(ValueError, match="unknown part 'roap'"):
        parse_candidate("roap")
    with pytest.raises(ValueError, match="at most one of each"):
        parse_candidate("rope+alibi")
    with pytest.raises(ValueError, match="at most one of each"):
        parse_candidate("sinusoidal+lff")
    with pytest.raises(ValueError, match="unknown part"):
        parse_candidate("rope+")


@pytest.mark.parametrize("name", ["sinusoidal", "learned_table", "lff"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_sequence_encoding_against_a_loop_over_positions(name, batch_first):
    torch.manual_seed(0)
    kw = {"grid_size": 10} if name == "learned_table" else {}
    enc = create_encoding(name, in_dim=1, num_features=D, **kw).double()
    if name == "learned_table":
        with torch.no_grad():
            for p in enc.parameters():  # away from the small initial values, so a wrong row would show
                p.normal_()
    layer = SequenceEncoding(enc, 10, batch_first=batch_first)
    x = torch.randn(2, 7, D, dtype=torch.float64) if batch_first else torch.randn(7, 2, D, dtype=torch.float64)
    got = (layer(x) - x).detach()
    for i in range(7):
        p = float(i) if name != "lff" else -1.0 + 2.0 * (i + 0.5) / 10
        pos = torch.tensor([[p]], dtype=torch.float64) if name == "lff" else torch.tensor([[i]])
        f = enc(pos)[0].detach()
        f = f / math.sqrt(float((f * f).mean()) + 1e-10)
        row = got[:, i] if batch_first else got[i]
        assert torch.allclose(row, f.expand_as(row), atol=1e-12, rtol=0), (name, i)
    # a token keeps its encoding whatever the length (what extrapolation needs)
    short = x[:, :3] if batch_first else x[:3]
    longer = (layer(short) - short).detach()
    assert torch.allclose(longer, got[:, :3] if batch_first else got[:3], atol=1e-12, rtol=0)


def test_sequence_encoding_cape_augments_per_sample_in_training_only():
    enc = create_encoding("cape", in_dim=1, num_features=D, seed=0)
    layer = SequenceEncoding(enc, 8)
    x = torch.zeros(4, 8, D)
    layer.train()
    out = layer(x)
    assert not torch.allclose(out[0], out[1])  # each example its own shift
    layer.eval()
    ev = layer(x)
    assert torch.equal(ev[0], ev[3])
    sin = SequenceEncoding(create_encoding("sinusoidal", in_dim=1, num_features=D), 8).eval()
    assert torch.allclose(ev[0], sin(x)[0], atol=1e-5)  # CAPE in evaluation: the sinusoids (text preset)


def test_sequence_encoding_bad_input():
    layer = SequenceEncoding(create_encoding("sinusoidal", in_dim=1, num_features=D), 5)
    with pytest.raises(ValueError, match="max_len=5"):
        layer(torch.zeros(1, 6, D))
    with pytest.raises(ValueError, match="floating-point token features"):
        layer(torch.zeros(1, 5, D, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len must be"):
        SequenceEncoding(create_encoding("sinusoidal", in_dim=1, num_features=D), 0)


@pytest.mark.parametrize("name", ["rope", "xpos", "alibi", "t5", "kernelized"])
def test_with_encoding_swaps_every_attention_keeping_its_projections(name):
    model = fresh(dropout=0.0)
    before = {n: m.in_proj_weight.detach().clone() for n, m in model.named_modules()
              if isinstance(m, nn.MultiheadAttention)}
    state = torch.get_rng_state()
    out = with_encoding(model, name)
    assert out is model and torch.equal(torch.get_rng_state(), state)  # the global random state is untouched
    kind = KernelizedMHA if name == "kernelized" else RelativeMHA
    for path, w in before.items():
        new = model.get_submodule(path)
        assert isinstance(new, kind) and torch.equal(new.in_proj_weight, w), path
    assert not any(isinstance(m, nn.MultiheadAttention) for m in model.modules())
    assert isinstance(model.pos, nn.Identity)
    y = model(TRAIN[0][:4])
    assert y.shape == (4, 3) and torch.isfinite(y).all()
    # the same seed builds the same position parameters
    again = with_encoding(fresh(dropout=0.0), name)
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)


def test_with_encoding_relative_changes_what_position_means():
    """rope makes attention see order: a permuted sequence gives another output; without it the
    mean-pooled transformer is permutation-invariant."""
    x = TRAIN[0][:2]
    perm = torch.randperm(L, generator=torch.Generator().manual_seed(0))
    plain = fresh(dropout=0.0).eval()
    assert torch.allclose(plain(x), plain(x[:, perm]), atol=1e-5)
    for name in ("rope", "alibi", "sinusoidal"):
        m = with_encoding(fresh(dropout=0.0), name, encoding_at="pos", max_len=L).eval()
        assert not torch.allclose(m(x), m(x[:, perm]), atol=1e-4), name


def test_with_encoding_bad_input():
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        with_encoding("net", "rope")
    with pytest.raises(ValueError, match="has none"):
        with_encoding(nn.Linear(3, 3), "rope")
    with pytest.raises(ValueError, match="encoding_at="):
        with_encoding(fresh(), "sinusoidal", max_len=L)
    with pytest.raises(ValueError, match="max_len="):
        with_encoding(fresh(), "sinusoidal", encoding_at="pos")
    with pytest.raises(ValueError, match="encoding_at='nope'.*no such submodule"):
        with_encoding(fresh(), "sinusoidal", encoding_at="nope", max_len=L)
    with pytest.raises(ValueError, match="seed must be"):
        with_encoding(fresh(), "rope", seed=-1)
    with pytest.raises(ValueError, match="already has posenc attention"):
        with_encoding(with_encoding(fresh(), "rope"), "alibi")
    with pytest.raises(ValueError, match="'lff' cannot encode"):
        with_encoding(fresh(), "lff", encoding_at="pos", max_len=L, encoding_kwargs={"lff": {"bogus": 1}})
    model = fresh()
    keep = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match="attention layer"):
        with_encoding(model, "rope", encoding_kwargs={"attention": {"rotary_dim": 3}})
    assert all(isinstance(m, nn.MultiheadAttention) for m in (model.encoder.layers[0].self_attn,
                                                                model.encoder.layers[1].self_attn))
    assert all(torch.equal(a, b) for a, b in zip(keep.values(), model.state_dict().values()))


def test_race_over_families_returns_the_winner_trained_exactly_as_alone():
    model = fresh()
    seen = []
    sel = choose_encoding(model, TRAIN, VAL, candidates=CANDS, encoding_at="pos", seed=3, callback=seen.append,
                          budget=BUDGET, **RECIPE)
    choice = sel.choices["encoding"]
    assert sel.rebuild == {"candidate": choice, "encoding_at": "pos", "max_len": L, "dim": D, "seed": 3}
    ref = with_encoding(fresh(), **sel.rebuild)
    train_network(ref, TRAIN, seed=3, optimizer="adamw", lr_min=1e-5, weight_decay=0.05, **RECIPE)
    assert list(ref.state_dict()) == list(model.state_dict())
    for (k, a), b in zip(ref.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), k
    assert [d["rung"] for d in seen] == list(range(1, len(sel.decisions) + 1)) and seen[-1]["steps"] == 12
    assert set(sel.candidates["encoding"]) == set(CANDS)
    assert {r["family"] for r in sel.candidates["encoding"].values()} == {"additive", "relative", "combined"}
    held = any(d["held"] for d in sel.decisions)
    assert sel.cost["steps"] <= (HOLD_LIMIT if held else 1.0) * BUDGET * 12 + 1e-9
    text = str(sel)
    assert f"* {choice}" in text and "cost:" in text and "val accuracy" in text
    # saved and loaded on its own: a fresh plain model, rebuilt, gives the same outputs
    loaded = with_encoding(fresh(seed=9), **sel.rebuild)
    loaded.load_state_dict(model.state_dict())
    model.eval(), loaded.eval()
    assert torch.equal(model(VAL[0]), loaded(VAL[0]))


def test_race_over_families_seq_first_and_progress(capsys):
    model = fresh(batch_first=False)
    sel = choose_encoding(model, TRAIN, VAL, candidates=["none", "sinusoidal", "rope"], encoding_at="pos",
                          progress=True, **RECIPE)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == len(sel.decisions) and err[0].startswith("choose_encoding: rung 1/")
    assert model(VAL[0]).shape == (48, 3)


def test_refused_race_leaves_the_model_as_it_was():
    model = fresh()
    keep = copy.deepcopy(model.state_dict())
    bad_val = [VAL, (VAL[0], VAL[1] + 5)]  # batch 2 has labels out of range: found after training started
    with pytest.raises(ValueError, match="targets must be class indices"):
        choose_encoding(model, TRAIN, bad_val, candidates=CANDS, encoding_at="pos", budget=4.0, **RECIPE)
    assert isinstance(model.pos, nn.Identity)
    assert isinstance(model.encoder.layers[0].self_attn, nn.MultiheadAttention)
    assert all(torch.equal(a, b) for a, b in zip(keep.values(), model.state_dict().values()))


def test_criterion_auto_reads_the_targets():
    tr, va = task(64, 0, regression=True), task(32, 1, regression=True)
    sel = choose_encoding(fresh(classes=1), tr, va, candidates=["none", "rope"], loss_fn=nn.functional.mse_loss,
                          **RECIPE)
    assert sel.criterion == "loss"
    assert all(r["score"] == r["val_loss"] for r in sel.candidates["encoding"].values())
    with pytest.raises(ValueError, match="criterion='accuracy' needs class labels"):
        choose_encoding(fresh(classes=1), tr, va, candidates=["none", "rope"], criterion="accuracy",
                        loss_fn=nn.functional.mse_loss, **RECIPE)
    assert choose_encoding(fresh(), TRAIN, VAL, candidates=["none", "rope"], **RECIPE).criterion == "accuracy"


def test_max_len_defaults_to_the_longest_seen_and_longer_val_is_encoded():
    val = [task(16, 1, length=9), task(16, 2, length=12)]  # validation longer than training: extrapolation
    sel = choose_encoding(fresh(), TRAIN, val, candidates=["learned_table", "rope"], encoding_at="pos", **RECIPE)
    assert sel.rebuild["max_len"] == 12  # the first batch of train and every batch of val
    sel = choose_encoding(fresh(), TRAIN, val, candidates=["learned_table", "rope"], encoding_at="pos", max_len=20,
                          **RECIPE)
    assert sel.rebuild["max_len"] == 20
    with pytest.raises(ValueError, match="max_len=4 is shorter than the 12 tokens"):
        choose_encoding(fresh(), TRAIN, val, candidates=["learned_table"], encoding_at="pos", max_len=4, **RECIPE)


def test_family_race_bad_input():
    with pytest.raises(ValueError, match="takes selector='race'"):
        choose_encoding(fresh(), TRAIN, VAL, candidates=CANDS, encoding_at="pos", selector="pt", **RECIPE)
    with pytest.raises(ValueError, match="non-empty list"):
        choose_encoding(fresh(), TRAIN, VAL, candidates="rope", **RECIPE)
    with pytest.raises(ValueError, match="listed more than once"):
        choose_encoding(fresh(), TRAIN, VAL, candidates=["rope", "rope"], **RECIPE)
    with pytest.raises(ValueError, match="unknown part 'sinus'"):
        choose_encoding(fresh(), TRAIN, VAL, candidates=["sinus"], **RECIPE)
    with pytest.raises(ValueError, match="encoding_at="):
        choose_encoding(fresh(), TRAIN, VAL, candidates=["none", "sinusoidal"], **RECIPE)
    with pytest.raises(ValueError, match="encoding_at='x'.*no such submodule"):
        choose_encoding(fresh(), TRAIN, VAL, candidates=["none", "sinusoidal"], encoding_at="x", **RECIPE)
    with pytest.raises(ValueError, match="has none"):
        choose_encoding(nn.Sequential(nn.Flatten(), nn.Linear(L * F, 3)), TRAIN, VAL, candidates=["rope"], **RECIPE)
    with pytest.raises(ValueError, match="encoding_at is for a plain model with candidates="):
        choose_encoding(fresh(), TRAIN, VAL, encoding_at="pos", **RECIPE)
    with pytest.raises(ValueError, match="device must be a torch device"):
        choose_encoding(fresh(), TRAIN, VAL, candidates=["rope"], device="gpu7", **RECIPE)
    with pytest.raises(TypeError, match="callback must be callable"):
        choose_encoding(fresh(), TRAIN, VAL, candidates=["rope"], callback=3, **RECIPE)
    with pytest.raises(TypeError, match="progress must be a bool"):
        choose_encoding(fresh(), TRAIN, VAL, candidates=["rope"], progress="yes", **RECIPE)
    with pytest.raises(ValueError, match="criterion must be one of"):
        choose_encoding(fresh(), TRAIN, VAL, candidates=["rope"], criterion="f1", **RECIPE)


def test_device_moves_each_batch_to_the_model():
    """Inputs kept elsewhere (here: float64 on the CPU while the model is float32 would fail) are not the point:
    a batch on the model's device is used as is, and device= names where batches go."""
    seen = []

    class Spy(Plain):
        def forward(self, x):
            seen.append(x.device)
            return super().forward(x)

    torch.manual_seed(0)
    choose_encoding(Spy(), TRAIN, VAL, candidates=["none", "rope"], device="cpu", **RECIPE)
    assert seen and all(d == torch.device("cpu") for d in seen)


def test_race_holds_its_cuts_while_no_candidate_has_learned():
    """Random labels: nothing is learnable, so no rung's ranking means anything; the race holds its cuts (every
    candidate goes on) while the whole race fits HOLD_LIMIT times the budget, and always cuts before the last rung."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(96, L, F, generator=g)
    tr, va = (x, torch.randint(0, 3, (96,), generator=g)), (x[:48] + 0.01, torch.randint(0, 3, (48,), generator=g))
    cands = ["none", "sinusoidal", "rope", "alibi"]
    sel = choose_encoding(fresh(), tr, va, candidates=cands, encoding_at="pos", steps=32, batch_size=16, lr=1e-3)
    held = [d for d in sel.decisions if d["held"]]
    assert held and not sel.decisions[-1]["held"] and len(sel.decisions[-1]["candidates"]) == 1
    for d in held:  # a held rung trains every candidate of the rung before it
        before = sel.decisions[d["rung"] - 2]
        assert set(d["candidates"]) == set(before["candidates"])
    ent = -sum(p * math.log(p) for p in (torch.bincount(va[1], minlength=3).double() / 48).tolist() if p > 0)
    for name, r in sel.candidates["encoding"].items():
        assert r["learned"] is (r["val_loss"] < (1 - LEARNED_MARGIN) * ent), name
    assert 2.0 * 32 < sel.cost["steps"] <= HOLD_LIMIT * 2.0 * 32 + 1e-9
    # a loss of the user's own has no constant baseline here: the race never holds
    sel = choose_encoding(fresh(), tr, va, candidates=cands, encoding_at="pos", steps=32, batch_size=16, lr=1e-3,
                          loss_fn=nn.functional.cross_entropy)
    assert not any(d["held"] for d in sel.decisions) and sel.cost["steps"] <= 2.0 * 32 + 1e-9
