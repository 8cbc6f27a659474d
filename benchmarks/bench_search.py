"""Benchmarks for perturbation-based architecture selection (area ``search``).

1. One perturbation decision (DARTS-PT: mask each op of one edge in turn and measure the
   supernet on the validation split, plus the unmasked measurement) as a ratio to one
   validation pass, on the 674-image digits validation split. Target: <= 1.2 x #ops.
   Beside it, the same pass with autograd on and batches of 64 (what a training-style
   loop would do), to show what ``torch.inference_mode`` and large batches buy.
2. Wall and CPU time of one whole search per seed on the micro NB201 space (3 edges x 5
   ops): supernet training, selection, and the measurement of the result.

CPU time (``time.process_time``) is reported beside wall time: on a shared machine the
wall clock also counts other processes.
"""

from __future__ import annotations

import copy
import time

import torch

from benchmarks.common import peak_rss_mb, timeit
from posenc.search import (
    SPACE_TRAINING,
    build_space,
    digits_splits,
    evaluate,
    mixed_ops,
    perturbation_select,
    run_search,
)


def _cpu_timeit(fn, repeat: int) -> dict:
    fn()
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"min_s": min(wall), "median_s": sorted(wall)[len(wall) // 2], "cpu_min_s": min(cpu)}


def _grad_pass(model, val, batch_size: int) -> None:
    model.eval()
    x, y = val
    for s in range(0, x.shape[0], batch_size):
        torch.nn.functional.cross_entropy(model(x[s:s + batch_size]), y[s:s + batch_size])


def bench_decision(space: str, val, repeat: int) -> dict:
    torch.manual_seed(0)
    model = build_space(space)
    edge_name, edge = next(iter(mixed_ops(model).items()))
    n_ops = len(edge.names)
    val_pass = _cpu_timeit(lambda: evaluate(model, val, 512), repeat)
    grad_pass = _cpu_timeit(lambda: _grad_pass(model, val, 64), repeat)

    def decision() -> None:
        perturbation_select(copy.deepcopy(model), val, order=[edge_name], seed=0)

    copy_cost = timeit(lambda: copy.deepcopy(model), repeat=repeat)["min_s"]
    dec = _cpu_timeit(decision, repeat)
    dec_s = max(dec["min_s"] - copy_cost, 1e-9)
    return {
        "edge": edge_name, "ops": n_ops, "val_examples": int(val[0].shape[0]),
        "val_pass_s": val_pass["min_s"], "val_pass_cpu_s": val_pass["cpu_min_s"],
        "val_pass_autograd_batch64_s": grad_pass["min_s"], "val_pass_autograd_batch64_cpu_s": grad_pass["cpu_min_s"],
        "decision_s": dec_s, "deepcopy_s": copy_cost,
        "ratio": dec_s / val_pass["min_s"], "ratio_cpu": (dec["cpu_min_s"] - copy_cost) / val_pass["cpu_min_s"],
        "target_ratio": 1.2 * n_ops,
    }


def bench_micro_search(data, seeds: int, steps: int, finetune_epochs: float) -> dict:
    rows = []
    for selector in ("pt", "pt-fixed", "magnitude"):
        for seed in range(seeds):
            torch.manual_seed(seed)
            model = build_space("nb201-micro")
            t0, c0 = time.perf_counter(), time.process_time()
            res = run_search(model, data["train"], data["val"], selector=selector, steps=steps,
                             finetune_epochs=finetune_epochs, seed=seed, train_kwargs=SPACE_TRAINING["nb201-micro"])
            rows.append({"selector": selector, "seed": seed, "wall_s": time.perf_counter() - t0,
                         "cpu_s": time.process_time() - c0, "cpu_supernet_s": res["seconds"]["supernet"],
                         "cpu_select_s": res["seconds"]["select"], "val_accuracy": res["selected"]["val_accuracy"],
                         "choices": res["choices"]})
    return {"space": "nb201-micro", "steps": steps, "finetune_epochs": finetune_epochs, "batch_size": 64,
            "rows": rows}


def run(quick: bool) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        data = digits_splits(seed=0)
        repeat = 3 if quick else 7
        decision = {space: bench_decision(space, data["val"], repeat) for space in ("nb201-micro", "pe")}
        search = bench_micro_search(data, seeds=1 if quick else 3, steps=30 if quick else 300,
                                    finetune_epochs=0.0 if quick else 1.0)
    finally:
        torch.set_num_threads(threads)
    return {"decision": decision, "micro_search": search, "threads": 1, "peak_rss_mb": peak_rss_mb()}
