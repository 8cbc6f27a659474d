"""Benchmarks for perturbation-based architecture selection (area ``search``).

1. One perturbation decision as DARTS-PT's code makes it (mask each op of one edge in turn
   and measure the supernet's validation accuracy in batches of 64 with batch statistics,
   plus the unmasked measurement), as a ratio to one validation pass at the same settings.
   Target: at most 6 validation passes (masked ops are skipped, the ``none`` op needs no pass).
2. One supernet training step on the stacked spaces (an Adam step of alpha on a validation
   batch and an SGD step of the weights, batches of 64) as a ratio to one training step of the
   network PT picks (trained alone, as the ``search`` section retrains it). Goal: at most the
   number of candidate ops + 1.

Timings are taken round-robin (the two things compared alternate, repeated), and both wall
and CPU time (``time.process_time``) are recorded, with the load average: on a shared machine
the wall clock also counts other processes.
"""

from __future__ import annotations

import copy
import os
import statistics
import time

import torch

from benchmarks.common import peak_rss_mb
from posenc.search import (
    SPACE_TRAINING,
    build_space,
    darts_pt,
    digits_splits,
    evaluate,
    mixed_ops,
    perturbation_select,
    train_darts,
    train_network,
)

#: spaces of the decision benchmark and their build arguments
DECISION_SPACES = {"nb201-micro": {}, "s3": {"num_cells": 3}, "pe": {}}
#: stacked spaces of the training-step benchmark
STEP_SPACES = {"nb201-3cells": ("nb201", {"num_cells": 3, "num_nodes": 3, "channels": 8, "ops": ("skip", "conv3x3")}),
               "s2": ("s2", {"num_cells": 3}), "s3": ("s3", {"num_cells": 3}), "s4": ("s4", {"num_cells": 3})}


def _round_robin(fns: dict, repeat: int) -> dict:
    """Median wall and CPU seconds of each function, calling them in turn ``repeat`` times."""
    for fn in fns.values():
        fn()
    wall: dict = {k: [] for k in fns}
    cpu: dict = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    return {k: {"wall_s": statistics.median(wall[k]), "cpu_s": statistics.median(cpu[k])} for k in fns}


def bench_decision(space: str, kwargs: dict, val, repeat: int) -> dict:
    torch.manual_seed(0)
    model = build_space(space, **kwargs)
    edge_name, edge = next(iter(mixed_ops(model).items()))
    copies = [copy.deepcopy(model) for _ in range(repeat + 1)]

    def decision() -> None:
        perturbation_select(copies.pop(), val, order=[edge_name], seed=0)

    t = _round_robin({"val_pass": lambda: evaluate(model, val, 64, bn="batch"), "decision": decision}, repeat)
    return {"edge": edge_name, "ops": len(edge.names), "val_examples": int(val[0].shape[0]),
            "val_pass_s": t["val_pass"]["wall_s"], "val_pass_cpu_s": t["val_pass"]["cpu_s"],
            "decision_s": t["decision"]["wall_s"], "decision_cpu_s": t["decision"]["cpu_s"],
            "ratio": t["decision"]["wall_s"] / t["val_pass"]["wall_s"],
            "ratio_cpu": t["decision"]["cpu_s"] / t["val_pass"]["cpu_s"], "target_ratio": 6.0}


def bench_step(name: str, space: str, kwargs: dict, data, repeat: int, warm_steps: int = 20) -> dict:
    torch.manual_seed(0)
    sup = build_space(space, **kwargs)
    kw = dict(SPACE_TRAINING[space])
    train_darts(sup, data["train"], data["val"], steps=warm_steps, seed=0, **kw)
    probe = copy.deepcopy(sup)
    sel, _ = darts_pt(probe, data["train"], data["val"], finetune_epochs=0, seed=0)  # operations, then topology
    sel.choices = {e: m.chosen for e, m in mixed_ops(probe).items() if not m.pruned}
    torch.manual_seed(0)
    alone = build_space(space, choices=sel.choices, affine=True, track_running_stats=True, **kwargs)
    n_ops = max(len(e.names) for e in mixed_ops(sup).values())
    batch = {"train": (data["train"][0][:64], data["train"][1][:64]), "val": (data["val"][0][:64], data["val"][1][:64])}

    def supernet_step() -> None:
        train_darts(sup, batch["train"], batch["val"], steps=1, seed=0, **kw)

    def alone_step() -> None:
        train_network(alone, batch["train"], steps=1, seed=0)

    t = _round_robin({"supernet": supernet_step, "picked": alone_step}, repeat)
    picks = {op: list(sel.choices.values()).count(op) for op in sorted(set(sel.choices.values()))}
    return {"space": space, "ops": n_ops, "pt_picks": picks,
            "supernet_step_s": t["supernet"]["wall_s"], "supernet_step_cpu_s": t["supernet"]["cpu_s"],
            "picked_step_s": t["picked"]["wall_s"], "picked_step_cpu_s": t["picked"]["cpu_s"],
            "ratio": t["supernet"]["wall_s"] / t["picked"]["wall_s"],
            "ratio_cpu": t["supernet"]["cpu_s"] / t["picked"]["cpu_s"], "goal_ratio": n_ops + 1}


def run(quick: bool) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    try:
        data = digits_splits(seed=0)
        repeat = 3 if quick else 9
        decision = {space: bench_decision(space, kw, data["val"], repeat) for space, kw in DECISION_SPACES.items()}
        step = {name: bench_step(name, space, kw, data, repeat) for name, (space, kw) in STEP_SPACES.items()}
    finally:
        torch.set_num_threads(threads)
    return {"decision": decision, "step": step, "threads": 1, "peak_rss_mb": peak_rss_mb(),
            "loadavg_before": list(load_before), "loadavg_after": list(os.getloadavg())}


def markdown(r: dict) -> str:
    """The tables of ``docs/search.md`` (``python -m benchmarks.tables``)."""
    from posenc.report.tables import markdown_table

    rows = [[space, d["ops"], f"{d['val_pass_s'] * 1e3:.0f}", f"{d['val_pass_cpu_s'] * 1e3:.0f}",
             f"{d['decision_s'] * 1e3:.0f}", f"{d['decision_cpu_s'] * 1e3:.0f}", f"{d['ratio']:.2f}",
             f"{d['ratio_cpu']:.2f}", f"{d['target_ratio']:.0f}"] for space, d in r["decision"].items()]
    n = next(iter(r["decision"].values()))["val_examples"]
    load = r.get("loadavg_before")
    out = [f"One perturbation decision (mask each op of one edge in turn, plus the unmasked pass; accuracy in "
           f"batches of 64 with batch statistics) against one validation pass at the same settings, {n} digits, "
           f"{r['threads']} thread" + (f", load average {load[0]:.1f} → {r['loadavg_after'][0]:.1f}" if load else "")
           + ":", "",
           markdown_table(["space", "ops", "val pass ms", "val pass CPU ms", "decision ms", "decision CPU ms",
                           "passes (wall)", "passes (CPU)", "target ≤"], rows)]
    rows = [[name, d["ops"], ", ".join(f"{op} ×{k}" for op, k in d["pt_picks"].items()),
             f"{d['supernet_step_s'] * 1e3:.0f}", f"{d['supernet_step_cpu_s'] * 1e3:.0f}",
             f"{d['picked_step_s'] * 1e3:.0f}", f"{d['picked_step_cpu_s'] * 1e3:.0f}", f"{d['ratio']:.2f}",
             f"{d['ratio_cpu']:.2f}", d["goal_ratio"]] for name, d in r["step"].items()]
    out += ["", "One supernet training step (an alpha step and a weight step, batches of 64) against one training "
            "step of the network PT picks (trained alone, affine BatchNorm), 3 stacked cells:", "",
            markdown_table(["space", "ops", "PT's picks", "supernet ms", "supernet CPU ms", "picked ms",
                            "picked CPU ms", "ratio (wall)", "ratio (CPU)", "goal ≤"], rows)]
    return "\n".join(out)
