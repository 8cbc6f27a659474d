"""`posenc.models.train` under torchrun: gradient averaging, proved against one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import posenc
from posenc.models import TrainConfig, train

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import ddp_worker  # noqa: E402


def test_two_ranks_equal_one_process_on_the_concatenated_batches(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(Path(posenc.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(HERE / "ddp_worker.py"), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = torch.load(tmp_path / "rank0.pt")
    assert got["history"]["world_size"] == 2
    assert json.loads((tmp_path / "progress0.json").read_text()) == [1, 2, 3, 4]
    assert json.loads((tmp_path / "progress1.json").read_text()) == []  # rank 1 never reports
    assert not list(tmp_path.glob("rank1*"))

    # the reference: one process, each step on rank 0's and rank 1's batches concatenated
    model, sample, loss_fn = ddp_worker.problem()
    cfg = TrainConfig(steps=4, lr=1e-2, warmup_steps=1, seed=3)
    gens = [torch.Generator().manual_seed(cfg.seed * 1_000_003 + r) for r in range(2)]

    def both(step, _gen):
        parts = [sample(step, g) for g in gens]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    ref = train(model, both, loss_fn, cfg)
    initial = ddp_worker.problem()[0].state_dict()
    params, got_params = dict(model.state_dict()), dict(got["params"])
    # The key bias gets a zero gradient in exact arithmetic (softmax is invariant to adding
    # q.b_k to every score of a query), so AdamW turns round-off there into full-size steps:
    # it is not determined by the data and is left out; the query and value biases are kept.
    d = model.dim
    for p in (params, got_params, initial):
        bias = p.pop("blocks.0.attn.qkv.bias")
        p["qkv.bias[q]"], p["qkv.bias[v]"] = bias[:d], bias[2 * d:]
    for name, value in params.items():
        assert not torch.equal(value, initial[name]), name  # it moved
        torch.testing.assert_close(got_params[name], value, rtol=1e-5, atol=1e-6, msg=name)
    # the reported loss is the mean over ranks = the loss on the concatenation (equal batch sizes)
    torch.testing.assert_close(torch.tensor(got["history"]["loss"]), torch.tensor(ref["loss"]), rtol=1e-5, atol=1e-7)


def test_world_size_without_a_group_or_torchrun_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)

    def sample(step, gen):
        return torch.randn(2, 3, generator=gen)

    with pytest.raises(RuntimeError, match="WORLD_SIZE=2 but no process group"):
        train(nn.Linear(3, 1), sample, lambda m, x: (m(x).pow(2).mean(), {}), TrainConfig(steps=1))
