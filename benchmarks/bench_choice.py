"""Choosing the position encoding (area ``choice``): ``choose_encoding``'s selectors against fixed defaults.

The setting is frozen in :mod:`benchmarks.choice_tasks` (10 shipped tasks, one tiny
transformer per task, one recipe, seeds 0-4). Ground truth: every candidate of
``ENCODING_CANDIDATES`` trained stand-alone with the recipe and each seed, scored on the
task's test split. For every task-seed each selector of :data:`posenc.search.CHOICE_SELECTORS`
runs ``choose_encoding(budget=2)`` from the same initial model, and three fixed policies are
read off the ground truth: always ``learned_table``, always ``sinusoidal``, and train all four
and keep the best validation accuracy (ties by validation loss; cost 4 trainings).

Per policy: the share of task-seeds whose pick is within 1 point of the best candidate's mean
test accuracy (the regret of a pick is the best candidate's mean minus the pick's mean, over
the seeds), the mean regret, paired differences of regret against each fixed policy (mean
and 95 % Student-t interval over task-seeds), and the cost as a ratio to one stand-alone
training, in steps (as ``choose_encoding`` counts them) and in CPU seconds (process time,
one thread, measured in the same process as the ground truth).

``POSENC_BENCH_WORKERS=2`` runs task-seeds in two processes (each at one thread);
``POSENC_BENCH_CACHE=DIR`` keeps each finished task-seed in DIR and reuses it.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

from benchmarks.choice_tasks import CANDIDATES, RECIPE, SEEDS, TASKS, build_model, load_task
from posenc.search import CHOICE_SELECTORS, DEFAULT_CHOICE_SELECTOR, choose_encoding, evaluate, mixed_ops, train_network

#: Fixed policies compared with every selector.
BASELINES: tuple[str, ...] = ("always learned_table", "always sinusoidal", "train all, pick by validation")
#: Tasks and sizes of the quick (smoke) run.
QUICK = {"tasks": ("wine", "digits-patches"), "seeds": (0, 1), "steps": 12, "subset": 24}
BUDGET = 2.0


def _standalone(task: dict, seed: int, candidate: str, length: dict) -> dict[str, Any]:
    """One candidate trained alone: the model of ``seed`` with its EncodingSearch discretised."""
    model = build_model(task, seed)
    mixed_ops(model)["pos"].discretize(candidate)
    c0 = time.process_time()
    hist = train_network(model, task["train"], seed=seed, **length, **RECIPE)
    cpu = time.process_time() - c0
    val_loss, val_acc = evaluate(model, task["val"])
    _, test_acc = evaluate(model, task["test"])
    return {"val_accuracy": val_acc, "val_loss": val_loss, "test_accuracy": test_acc, "steps": hist["steps"],
            "cpu_s": cpu}


def _selector(task: dict, seed: int, selector: str, length: dict) -> dict[str, Any]:
    model = build_model(task, seed)
    c0 = time.process_time()
    sel = choose_encoding(model, task["train"], task["val"], budget=BUDGET, selector=selector, seed=seed,
                          **length, **RECIPE)
    cpu = time.process_time() - c0
    out = {"choice": sel.choices["pos"], "steps": sel.cost["steps"], "step_ratio": sel.cost["ratio"], "cpu_s": cpu,
           "candidates": next(iter(sel.candidates.values()))}
    if selector == "race":  # the winner comes back trained exactly as it trains alone
        out["test_accuracy"] = evaluate(model, task["test"])[1]
    return out


def cached(stem: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``compute()``, kept as ``$POSENC_BENCH_CACHE/<stem>.json`` when that variable is set and
    reused from there (a stopped run resumes)."""
    cache = os.environ.get("POSENC_BENCH_CACHE")
    path = Path(cache) / f"{stem}.json" if cache else None
    if path is not None and path.exists():
        return json.loads(path.read_text())
    out = compute()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out))
        tmp.replace(path)
    return out


def task_seed(name: str, seed: int, quick: bool = False) -> dict[str, Any]:
    """Ground truth and every selector on one task and seed (one thread), cached (:func:`cached`)."""
    return cached(f"{name}.{seed}{'.quick' if quick else ''}", lambda: _task_seed(name, seed, quick))


def _task_seed(name: str, seed: int, quick: bool) -> dict[str, Any]:
    torch.set_num_threads(1)
    task = load_task(name, subset=QUICK["subset"] if quick else None)
    length = {"steps": QUICK["steps"]} if quick else {"epochs": task["epochs"]}
    gt = {c: _standalone(task, seed, c, length) for c in CANDIDATES}
    sels = {s: _selector(task, seed, s, length) for s in CHOICE_SELECTORS}
    return {"task": name, "seed": seed, "ground_truth": gt, "selectors": sels}


def _pick_by_val(gt: dict[str, dict]) -> str:
    return sorted(gt, key=lambda c: (-gt[c]["val_accuracy"], gt[c]["val_loss"]))[0]


def t_interval(diffs: list[float]) -> dict[str, Any]:
    """Mean and 95 % Student-t interval of paired differences."""
    from scipy import stats

    n = len(diffs)
    mean = statistics.fmean(diffs)
    if n < 2:
        return {"mean": mean, "low": None, "high": None, "n": n}
    sd = statistics.stdev(diffs)
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def summarise(units: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-task ground truth means and, per policy, the share within 1 point, mean regret, paired
    comparisons and cost ratios."""
    by_task: dict[str, list[dict]] = {}
    for u in units:
        by_task.setdefault(u["task"], []).append(u)
    tasks = {}
    for name, us in by_task.items():
        means = {c: 100 * statistics.fmean(u["ground_truth"][c]["test_accuracy"] for u in us) for c in CANDIDATES}
        tasks[name] = {"mean_test_accuracy": means, "best": max(means, key=means.get), "best_mean": max(means.values()),
                       "seeds": len(us)}
    picks: dict[str, list[tuple[str, int, str]]] = {p: [] for p in (*CHOICE_SELECTORS, *BASELINES)}
    cost: dict[str, list[tuple[float, float]]] = {p: [] for p in picks}
    for u in units:
        gt, key = u["ground_truth"], (u["task"], u["seed"])
        one_cpu = statistics.fmean(g["cpu_s"] for g in gt.values())
        one_steps = statistics.fmean(g["steps"] for g in gt.values())
        for s, r in u["selectors"].items():
            picks[s].append((*key, r["choice"]))
            cost[s].append((r["step_ratio"], r["cpu_s"] / one_cpu))
        picks["always learned_table"].append((*key, "learned_table"))
        picks["always sinusoidal"].append((*key, "sinusoidal"))
        picks["train all, pick by validation"].append((*key, _pick_by_val(gt)))
        cost["always learned_table"].append((1.0, gt["learned_table"]["cpu_s"] / one_cpu))
        cost["always sinusoidal"].append((1.0, gt["sinusoidal"]["cpu_s"] / one_cpu))
        cost["train all, pick by validation"].append(
            (sum(g["steps"] for g in gt.values()) / one_steps, sum(g["cpu_s"] for g in gt.values()) / one_cpu))
    regret = {p: [tasks[t]["best_mean"] - tasks[t]["mean_test_accuracy"][c] for t, _, c in rows]
              for p, rows in picks.items()}
    policies = {}
    for p, rows in picks.items():
        r = regret[p]
        policies[p] = {
            "within_1_point": sum(x <= 1.0 + 1e-9 for x in r) / len(r), "within_1_point_count": sum(x <= 1.0 + 1e-9 for x in r),
            "task_seeds": len(r), "mean_regret": statistics.fmean(r),
            "step_ratio": statistics.median(c[0] for c in cost[p]), "cpu_ratio": statistics.median(c[1] for c in cost[p]),
            "cpu_ratio_max": max(c[1] for c in cost[p]), "step_ratio_max": max(c[0] for c in cost[p]),
            "picks": {f"{t}/{s}": c for t, s, c in rows},
            "versus": {b: t_interval([a - o for a, o in zip(r, regret[b])]) for b in BASELINES if b != p},
        }
    per_task = {}
    for t in tasks:
        per_task[t] = {p: {"picks": [c for tt, _, c in picks[p] if tt == t],
                           "mean_regret": statistics.fmean(x for (tt, _, _), x in zip(picks[p], regret[p]) if tt == t)}
                       for p in picks}
    race_match = [abs(u["selectors"]["race"]["test_accuracy"] - u["ground_truth"][u["selectors"]["race"]["choice"]]
                      ["test_accuracy"]) < 1e-12 for u in units if "test_accuracy" in u["selectors"].get("race", {})]
    goal = {}
    d = policies[DEFAULT_CHOICE_SELECTOR]
    goal = {"selector": DEFAULT_CHOICE_SELECTOR, "within_1_point_at_least_80pct": d["within_1_point"] >= 0.8,
            "regret_below_every_fixed_policy": all(d["mean_regret"] < policies[b]["mean_regret"] for b in BASELINES),
            "cost_at_most_2x": d["step_ratio_max"] <= 2.0 + 1e-9}
    goal["met"] = all(goal[k] for k in ("within_1_point_at_least_80pct", "regret_below_every_fixed_policy",
                                        "cost_at_most_2x"))
    return {"tasks": tasks, "policies": policies, "per_task": per_task, "goal": goal,
            "race_model_equals_its_standalone_training": all(race_match) if race_match else None}


def run_units(fn: Callable[[str, int, bool], dict], jobs: list[tuple[str, int]],
              quick: bool) -> tuple[list[dict], int, float | None]:
    """``fn(task, seed, quick)`` for every job, in ``$POSENC_BENCH_WORKERS`` processes (one thread
    each); the results, the number of workers and, with one worker, the CPU time it took."""
    workers = int(os.environ.get("POSENC_BENCH_WORKERS", "1"))
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            return list(pool.map(fn, [t for t, _ in jobs], [s for _, s in jobs], [quick] * len(jobs))), workers, None
    threads = torch.get_num_threads()
    c0 = time.process_time()
    try:
        units = [fn(t, s, quick) for t, s in jobs]
    finally:
        torch.set_num_threads(threads)
    return units, workers, time.process_time() - c0


def run(quick: bool = False, *, tasks: tuple[str, ...] | None = None, seeds: tuple[int, ...] | None = None) -> dict:
    tasks = tasks or (QUICK["tasks"] if quick else tuple(TASKS))
    seeds = seeds or (QUICK["seeds"] if quick else SEEDS)
    jobs = [(t, s) for s in seeds for t in tasks]  # seed-major: a stopped run still covers every task
    load_before = os.getloadavg()
    units, workers, cpu = run_units(task_seed, jobs, quick)
    unit_cpu = sum(g["cpu_s"] for u in units for g in [*u["ground_truth"].values(), *u["selectors"].values()])
    return {"budget": BUDGET, "candidates": list(CANDIDATES), "units_cpu_s": unit_cpu, "selectors": list(CHOICE_SELECTORS),
            "default": DEFAULT_CHOICE_SELECTOR, "recipe": RECIPE, "seeds": list(seeds),
            "task_info": {t: TASKS[t] for t in tasks}, "units": units, "summary": summarise(units),
            "cpu_s": cpu, "workers": workers, "threads": 1, "loadavg_before": list(load_before),
            "loadavg_after": list(os.getloadavg())}


def from_cache(directory: str | Path, *, tasks: tuple[str, ...] | None = None,
               seeds: tuple[int, ...] | None = None) -> dict:
    """The result of the task-seeds finished so far in a ``$POSENC_BENCH_CACHE`` directory, in
    the same format as :func:`run`, with ``complete`` telling whether every task-seed is there."""
    tasks = tasks or tuple(TASKS)
    seeds = seeds or SEEDS
    units = []
    for s in seeds:
        for t in tasks:
            path = Path(directory) / f"{t}.{s}.json"
            if path.exists():
                units.append(json.loads(path.read_text()))
    unit_cpu = sum(g["cpu_s"] for u in units for g in [*u["ground_truth"].values(), *u["selectors"].values()])
    done = sorted({u["seed"] for u in units})
    return {"budget": BUDGET, "candidates": list(CANDIDATES), "units_cpu_s": unit_cpu,
            "selectors": list(CHOICE_SELECTORS), "default": DEFAULT_CHOICE_SELECTOR, "recipe": RECIPE,
            "seeds": done, "task_info": {t: TASKS[t] for t in tasks}, "units": units, "summary": summarise(units),
            "complete": len(units) == len(tasks) * len(seeds), "task_seeds_done": len(units),
            "task_seeds_planned": len(tasks) * len(seeds), "cpu_s": None, "threads": 1}


def _fmt_ci(v: dict[str, Any]) -> str:
    if v["low"] is None:
        return f"{v['mean']:+.2f}"
    return f"{v['mean']:+.2f} [{v['low']:+.2f}, {v['high']:+.2f}]"


def markdown(r: dict) -> str:
    """The tables of docs/search.md and the results page (``python -m benchmarks.tables``)."""
    from posenc.report.tables import markdown_table

    s = r["summary"]
    pol = s["policies"]
    labels = {"race": "`race` (successive halving)", "pt": "`pt` (fixed α, keep-one)", "magnitude": "`magnitude`"}
    n = next(iter(pol.values()))["task_seeds"]
    rows = []
    for p, v in pol.items():
        name = labels.get(p, p) + (" — default" if p == r["default"] else "")
        rows.append([name, f"{v['within_1_point_count']}/{n} ({100 * v['within_1_point']:.0f} %)",
                     f"{v['mean_regret']:.2f}", *[_fmt_ci(v["versus"][b]) if b in v["versus"] else "—"
                                                  for b in BASELINES],
                     f"{v['step_ratio']:.2f}", f"{v['cpu_ratio']:.2f} (max {v['cpu_ratio_max']:.2f})"])
    cpu = f", {r['units_cpu_s'] / 60:.0f} min of CPU for the trainings" if r.get("units_cpu_s") else ""
    partial = ("" if r.get("complete", True) else
               f"**Partial run: {r['task_seeds_done']} of the {r['task_seeds_planned']} planned task-seeds.** ")
    out = [partial + f"{len(s['tasks'])} tasks, seeds {', '.join(map(str, r['seeds']))}: {n} task-seeds, budget {r['budget']:g}, "
           f"candidates {', '.join(r['candidates'])}{cpu}. Regret: the best candidate's mean test accuracy "
           "minus the pick's (points, means over the seeds of stand-alone trainings); paired differences of "
           "regret (mean, 95 % t interval; negative: fewer points lost than the fixed policy); cost: median "
           "ratio to one stand-alone training:", "",
           markdown_table(["policy", "within 1 point", "mean regret", "vs always learned_table",
                           "vs always sinusoidal", "vs train all + pick", "cost (steps)", "cost (CPU)"], rows)]
    g = s["goal"]
    out += ["", f"Goal for the default (`{g['selector']}`): within 1 point on ≥ 80 % of task-seeds: "
            f"{'met' if g['within_1_point_at_least_80pct'] else 'missed'}; mean regret below every fixed policy: "
            f"{'met' if g['regret_below_every_fixed_policy'] else 'missed'}; cost ≤ 2 trainings: "
            f"{'met' if g['cost_at_most_2x'] else 'missed'}."]
    cands = r["candidates"]
    rows = []
    for t, info in s["tasks"].items():
        m = info["mean_test_accuracy"]
        picks = ", ".join(f"{p}: {_count(s['per_task'][t][p]['picks'])}" for p in r["selectors"])
        rows.append([t, r["task_info"][t]["kind"], *[f"**{m[c]:.1f}**" if c == info["best"] else f"{m[c]:.1f}"
                                                     for c in cands], picks])
    out += ["", "Per task: mean test accuracy (%) of each candidate trained alone, and each selector's picks over "
            "the seeds:", "", markdown_table(["task", "kind", *cands, "picks"], rows)]
    return "\n".join(out)


def _count(picks: list[str]) -> str:
    c: dict[str, int] = {}
    for p in picks:
        c[p] = c.get(p, 0) + 1
    return " ".join(f"{k}×{v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))
