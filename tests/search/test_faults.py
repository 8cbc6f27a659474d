"""Faults found by hostile testing of the search API, each with the error it must give now:
decided edges, the recipe's names, targets, seeds, channels, tokens, grids, loaders, saved state,
and memory refused before allocation (peak RSS of a subprocess)."""

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from posenc.search import (
    DARTS_RECIPE,
    ENCODING_RECIPE,
    DartsNet,
    EncodingSearch,
    MixedOp,
    alpha_lr,
    darts_pt,
    magnitude_select,
    perturbation_select,
    run_search,
    train_darts,
    train_network,
)
from posenc.search.supernet import mixed_ops, resolve_recipe

from ._known import Chain, data

ROOT = Path(__file__).resolve().parents[2]


def test_selecting_a_decided_edge_names_the_edge_and_the_call():
    model = Chain(n_edges=2)
    magnitude_select(model)  # applies its choice
    with pytest.raises(ValueError, match=r"perturbation_select: .*'edges\.0' \(discretised to '.*' by "
                                         r"magnitude_select\(\)\)"):
        perturbation_select(model, data(32))
    with pytest.raises(ValueError, match=r"magnitude_select: .*by magnitude_select\(\)"):
        magnitude_select(model)
    with pytest.raises(ValueError, match=r"magnitude_select: .*'edges\.1'"):
        magnitude_select(model, edges=["edges.1"])
    model.edges[0].clear_selection()
    assert model.edges[0].decided_by is None
    sel = perturbation_select(model, data(32))  # the undecided edge alone
    assert list(sel.choices) == ["edges.0"] and model.edges[0].decided_by == "perturbation_select()"
    model.edges[1].prune()
    with pytest.raises(ValueError, match=r"'edges\.1' \(pruned by MixedOp\.prune\(\)\)"):
        perturbation_select(model, data(32), order=["edges.1"])
    loaded = Chain(n_edges=2)
    loaded.load_state_dict(model.state_dict())
    assert loaded.edges[0].decided_by == "load_state_dict()"


def test_train_darts_takes_train_networks_names_and_the_old_ones_warn():
    tr, va = data(64), data(32, seed=1)
    torch.manual_seed(0)
    a = Chain()
    torch.manual_seed(0)
    b = Chain()
    ha = train_darts(a, tr, va, steps=6, batch_size=16, lr=0.05, lr_min=0.0, optimizer="sgd", momentum=0.5,
                     weight_decay=1e-4, a_lr=0.01)
    with pytest.warns(DeprecationWarning, match="w_lr= is deprecated; use lr="):
        hb = train_darts(b, tr, va, steps=6, batch_size=16, w_lr=0.05, w_lr_min=0.0, w_optimizer="sgd",
                         w_momentum=0.5, w_weight_decay=1e-4, a_lr=0.01)
    assert ha["train_loss"] == hb["train_loss"] and ha["alpha"] == hb["alpha"]
    with pytest.raises(TypeError, match="give lr= or its deprecated name w_lr=, not both"):
        train_darts(Chain(), tr, va, steps=1, lr=0.1, w_lr=0.1)
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['wlr'\\]"):
        train_darts(Chain(), tr, va, steps=1, wlr=0.1)
    # run_search / darts_pt: the old names in train_kwargs still work, with a warning
    with pytest.warns(DeprecationWarning, match="train_kwargs\\['w_lr'\\] is deprecated"):
        run_search(Chain(), tr, va, steps=2, finetune_epochs=0, train_kwargs={"w_lr": 0.05, "batch_size": 16})
    with pytest.raises(ValueError, match="both 'lr' and its deprecated name 'w_lr'"):
        darts_pt(Chain(), tr, va, train_kwargs={"w_lr": 0.05, "lr": 0.05})
    # the new names raise no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_search(Chain(), tr, va, steps=2, finetune_epochs=0, train_kwargs={"lr": 0.05, "batch_size": 16})


def test_transformer_defaults_for_encoding_only_models_and_the_alpha_rule():
    enc = nn.Sequential(EncodingSearch(8, 4))
    assert resolve_recipe(mixed_ops(enc), {}, {}) == ENCODING_RECIPE
    assert resolve_recipe(mixed_ops(Chain()), {}, {}) == DARTS_RECIPE
    assert resolve_recipe(mixed_ops(enc), {"lr": 0.5}, {})["lr"] == 0.5
    # alpha may travel ~6 units: DARTS's 3e-4 over 50 CIFAR-10 epochs of 391 steps
    assert alpha_lr(50 * 391) == pytest.approx(6 / 19550) and alpha_lr(120) == pytest.approx(0.05)
    assert alpha_lr(1) == 0.1 and alpha_lr(10**9) == 3e-4
    with pytest.raises(ValueError, match="steps must be >= 0"):
        alpha_lr(-1)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = EncodingSearch(8, 4)
            self.head = nn.Linear(32, 2)

        def forward(self, x):
            return self.head(self.pos(x).flatten(1))

    x = torch.randn(32, 4, 8)
    y = (x[:, 0, 0] > 0).long()
    torch.manual_seed(0)
    m = Net()
    hist = train_darts(m, (x, y), (x, y), steps=10, batch_size=8)
    # AdamW at 1e-3 with a_lr = alpha_lr(10) = 0.1 moves alpha far more than DARTS's SGD defaults would
    assert max(hist["alpha"]["pos"]) > 0.26 and hist["passes"] == 20


@pytest.mark.parametrize("call", ["train_darts", "perturbation_select", "darts_pt", "train_network"])
def test_targets_are_checked_naming_the_argument_and_range(call):
    x, y = data(32)
    bad = (x, y + 10)  # classes 10..19 for 10 outputs

    def go(split):
        model = Chain()
        if call == "train_darts":
            train_darts(model, split if split is bad else (x, y), split, steps=2, batch_size=16)
        elif call == "perturbation_select":
            perturbation_select(model, split)
        elif call == "darts_pt":
            darts_pt(model, (x, y), split, finetune_epochs=0)
        else:
            train_network(model, split, steps=2)

    name = "train" if call == "train_network" else "val"
    with pytest.raises(ValueError, match=rf"{name}: targets must be class indices in \[0, 9\] for the model's 10 "
                                         r"outputs \(or -100, ignored\), got values in \[10, 19\]"):
        go(bad)
    with pytest.raises(TypeError, match=rf"{name}: targets must be int64 class indices .* got torch.float32"):
        go((x, y.float()))


@pytest.mark.parametrize("which", ["inputs", "targets"])
def test_meta_tensors_are_refused_naming_the_argument(which):
    # a meta tensor has a shape and no values: torch's own error named no argument
    from posenc.search import evaluate

    x, y = data(8)
    pair = (x.to("meta"), y) if which == "inputs" else (x, y.to("meta"))
    for call in (lambda: evaluate(Chain(), pair), lambda: perturbation_select(Chain(), pair),
                 lambda: train_network(Chain(), pair, steps=1)):
        with pytest.raises(ValueError, match=rf"^(data|val|train): {which} are on the meta device"):
            call()


def test_seeds_beyond_a_generators_range_are_refused():
    x, y = data(32)
    for seed in (2**70, -1):
        with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*63 - 1\]"):
            perturbation_select(Chain(), (x, y), seed=seed)
        with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*63 - 1\]"):
            train_darts(Chain(), (x, y), (x, y), steps=1, seed=seed)
    train_darts(Chain(), (x, y), (x, y), steps=1, seed=2**63 - 1)  # the largest is fine


def test_channel_count_tokens_grid_and_loaders():
    net = DartsNet(4, 3, num_cells=1, num_nodes=1, in_channels=1)
    imgs = torch.randn(8, 3, 8, 8)
    with pytest.raises(ValueError, match=r"x must have shape \(batch, 1 channels \(in_channels\), H, W\), got "
                                         r"\(8, 3, 8, 8\)"):
        net(imgs)
    with pytest.raises(ValueError, match="in_channels"):
        train_darts(net, (imgs, torch.zeros(8, dtype=torch.long)), (imgs, torch.zeros(8, dtype=torch.long)), steps=1)
    enc = EncodingSearch(8, 4)
    with pytest.raises(TypeError, match="x must be a floating-point tensor .* got torch.int64"):
        enc(torch.zeros(2, 4, 8, dtype=torch.long))
    for grid in (True, "8", 2.5):
        with pytest.raises(TypeError, match="grid must be an int n"):
            EncodingSearch(8, grid)
    with pytest.raises(TypeError, match="grid must be an int"):
        EncodingSearch(8, (4, True))
    # a bad batch inside the validation loader is named as val, not 'data'
    x, y = data(32)
    loader = [(x[:16], y[:16]), (x[16:], y[16:], y[16:])]
    with pytest.raises(TypeError, match=r"^val \(batch\) |^val: batch 1 must be a pair"):
        darts_pt(Chain(), (x, y), loader, finetune_epochs=0)
    with pytest.raises(TypeError, match="^val"):
        perturbation_select(Chain(), DataLoader(TensorDataset(x), batch_size=8))


def test_state_dict_pruned_must_be_a_bool():
    edge = MixedOp({"a": nn.Identity(), "b": nn.Identity()})
    state = edge.state_dict()
    state["_extra_state"] = {"chosen": None, "pruned": "no"}
    with pytest.raises(TypeError, match="state_dict 'pruned' must be True or False, got str \\('no'\\)"):
        edge.load_state_dict(state)
    state["_extra_state"] = {"chosen": None, "pruned": False}
    edge.load_state_dict(state)
    assert edge.undecided


_GUARD = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {root!r})
    from benchmarks.common import peak_rss_mb
    import torch
    from posenc.search import DartsNet, EncodingSearch, NB201MicroNet
    base = peak_rss_mb()
    rows = []
    for name, make in [("EncodingSearch", lambda: EncodingSearch(dim=2**22, grid=(32, 32))),
                       ("DartsNet", lambda: DartsNet(channels=4096, num_cells=8)),
                       ("NB201MicroNet", lambda: NB201MicroNet(channels=64, num_cells=10**6))]:
        try:
            make()
            rows.append({{"case": name, "result": "built"}})
        except MemoryError as err:
            rows.append({{"case": name, "result": str(err), "value_error": isinstance(err, ValueError)}})
    rows.append({{"delta_mb": peak_rss_mb() - base}})
    print(json.dumps(rows))
""")


def test_refusals_allocate_next_to_nothing():
    env = {**os.environ, "POSENC_MAX_MEMORY": "2G",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _GUARD.format(root=str(ROOT))], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.splitlines()[-1])
    *refusals, delta = rows
    assert delta["delta_mb"] < 200, rows
    args = {"EncodingSearch": "dim=4194304, grid=(32, 32)", "DartsNet": "channels=4096, num_cells=8",
            "NB201MicroNet": "channels=64, num_cells=1000000"}
    for r in refusals:
        assert r["value_error"], r
        assert f"({args[r['case']]}), more than the limit of 2 GiB (set by $POSENC_MAX_MEMORY)" in r["result"], r
    cli = subprocess.run([sys.executable, "-m", "posenc", "search", "--space", "nb201", "--cells", "900",
                          "--max-memory", "1G"], capture_output=True, text=True, timeout=300, env=env)
    lines = cli.stderr.strip().splitlines()
    assert cli.returncode == 2 and len(lines) == 1, cli.stderr
    assert lines[0].startswith("error: search --space nb201 --cells 900 would need about") and "--cells" in lines[0]


def test_small_models_build_without_consulting_the_limit(monkeypatch):
    monkeypatch.setenv("POSENC_MAX_MEMORY", "1")  # one byte: any check would refuse
    EncodingSearch(32, (4, 4))
    DartsNet(8, 10, num_cells=3, num_nodes=2, in_channels=1)
