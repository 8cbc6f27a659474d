"""Choosing among encoding families (area ``families``): ``choose_encoding(candidates=...)`` on a plain model.

The setting is frozen in :mod:`benchmarks.family_tasks` (5 synthetic sequence tasks, 3 of them
tested longer than trained; a plain ``nn.TransformerEncoder`` model; one recipe; seeds 0-4; the 8
candidates of ``FAMILY_CANDIDATES``: additive, CAPE, rotary and bias). Ground truth: every candidate
given to the plain model with :func:`posenc.search.with_encoding` and trained stand-alone with
the recipe and the seed, scored on the test split. The race (the default selector) runs
``choose_encoding(budget=2)`` from the same initial model, and again at budget 3; the fixed policies are read off the
ground truth: always one candidate (each of the 8), and train all 8 and keep the best validation
accuracy (ties by validation loss; cost 8 trainings).

Per policy: the share of task-seeds whose pick is within 1 point of the best candidate's mean test
accuracy (over the seeds), the mean regret (the best candidate's mean minus the pick's mean, in
points), the race's paired difference of regret against each fixed policy (mean, 95 % t interval
over task-seeds), and the cost as a ratio to one stand-alone training: steps (as
``choose_encoding`` counts them; median and max) and CPU seconds (process time, one thread, in the
same process as the ground truth). Per task: each candidate's mean test accuracy, and whether
position matters (the best candidate against ``none``, paired over seeds).

``POSENC_BENCH_WORKERS=2`` runs task-seeds in two processes (each at one thread);
``POSENC_BENCH_CACHE=DIR`` keeps each finished task-seed in DIR and reuses it.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.bench_choice import cached, run_units, t_interval
from benchmarks.family_tasks import CANDIDATES, RECIPE, SEEDS, TASKS, build_model, load_task
from posenc.search import choose_encoding, evaluate, train_network, with_encoding

BUDGET = 2.0
#: A second race, at a larger budget: with 8 candidates, budget 2 puts the first rung at 7.5 % of the training.
BUDGET_LARGER = 3.0
#: Tasks and sizes of the quick (smoke) run.
QUICK = {"tasks": ("first-token", "adjacent-pair"), "seeds": (0, 1), "epochs": 12, "subset": 128}
RACE = "race (default), budget 2"
RACE_LARGER = "race, budget 3"
BRUTE = "train all, pick by validation"


def _recipe(quick: bool) -> dict[str, Any]:
    return {**RECIPE, "epochs": QUICK["epochs"]} if quick else dict(RECIPE)


def _standalone(task: dict, seed: int, candidate: str, recipe: dict, build: Callable = build_model,
                where: dict | None = None) -> dict[str, Any]:
    """``candidate`` given to the plain model ``build(task, seed)`` and trained alone (``where``: the
    keywords that place it, default ``encoding_at="pos"`` and the task's ``max_len``)."""
    where = where or {"encoding_at": "pos", "max_len": task["max_len"]}
    model = with_encoding(build(task, seed), candidate, seed=seed, **where)
    c0 = time.process_time()
    hist = train_network(model, task["train"], seed=seed, **recipe)
    cpu = time.process_time() - c0
    val_loss, val_acc = evaluate(model, task["val"])
    _, test_acc = evaluate(model, task["test"])
    return {"val_accuracy": val_acc, "val_loss": val_loss, "test_accuracy": test_acc, "steps": hist["steps"],
            "cpu_s": cpu, "final_train_loss": hist["train_loss"][-1]}


def _race(task: dict, seed: int, recipe: dict, budget: float = BUDGET, build: Callable = build_model,
          candidates: tuple[str, ...] | None = None, where: dict | None = None) -> dict[str, Any]:
    """``choose_encoding`` on the plain model ``build(task, seed)`` over ``candidates`` (default this module's)."""
    where = where or {"encoding_at": "pos", "max_len": task["max_len"]}
    model = build(task, seed)
    c0 = time.process_time()
    sel = choose_encoding(model, task["train"], task["val"], candidates=list(candidates or CANDIDATES),
                          budget=budget, seed=seed, **where, **recipe)
    cpu = time.process_time() - c0
    return {"choice": sel.choices["encoding"], "steps": sel.cost["steps"], "step_ratio": sel.cost["ratio"],
            "cpu_s": cpu, "held": sum(bool(d["held"]) for d in sel.decisions),
            "rungs": [d["steps"] for d in sel.decisions], "candidates": sel.candidates["encoding"],
            "test_accuracy": evaluate(model, task["test"])[1]}


def task_seed(name: str, seed: int, quick: bool = False) -> dict[str, Any]:
    """Ground truth and the race on one task and seed (one thread), cached."""
    return cached(f"families.{name}.{seed}{'.quick' if quick else ''}", lambda: _task_seed(name, seed, quick))


def _task_seed(name: str, seed: int, quick: bool) -> dict[str, Any]:
    torch.set_num_threads(1)
    task = load_task(name, seed, subset=QUICK["subset"] if quick else None)
    recipe = _recipe(quick)
    gt = {c: _standalone(task, seed, c, recipe) for c in CANDIDATES}
    return {"task": name, "seed": seed, "ground_truth": gt, "race": _race(task, seed, recipe),
            "race_larger": _race(task, seed, recipe, BUDGET_LARGER)}


def _pick_by_val(gt: dict[str, dict]) -> str:
    return sorted(gt, key=lambda c: (-gt[c]["val_accuracy"], gt[c]["val_loss"]))[0]


def summarise(units: list[dict[str, Any]], candidates: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Per-task means and whether position matters; per policy: within 1 point, regret, cost
    (``candidates``: those of the units' suite; default this module's)."""
    CANDIDATES = candidates or globals()["CANDIDATES"]  # noqa: N806
    by_task: dict[str, list[dict]] = {}
    for u in units:
        by_task.setdefault(u["task"], []).append(u)
    tasks = {}
    for name, us in by_task.items():
        means = {c: 100 * statistics.fmean(u["ground_truth"][c]["test_accuracy"] for u in us) for c in CANDIDATES}
        best = max(means, key=means.get)
        gap = t_interval([100 * (u["ground_truth"][best]["test_accuracy"] - u["ground_truth"]["none"]["test_accuracy"])
                          for u in us])
        tasks[name] = {"mean_test_accuracy": means, "best": best, "best_mean": means[best], "seeds": len(us),
                       "best_minus_none": gap,
                       "position_matters": gap["low"] is not None and gap["low"] > 0}
    policies_picks: dict[str, list[tuple[str, int, str]]] = {RACE: [], RACE_LARGER: [], BRUTE: [],
                                                             **{f"always {c}": [] for c in CANDIDATES}}
    cost: dict[str, list[tuple[float, float]]] = {p: [] for p in policies_picks}
    for u in units:
        gt, key = u["ground_truth"], (u["task"], u["seed"])
        one_cpu = statistics.fmean(g["cpu_s"] for g in gt.values())
        one_steps = statistics.fmean(g["steps"] for g in gt.values())
        for p, k in ((RACE, "race"), (RACE_LARGER, "race_larger")):
            policies_picks[p].append((*key, u[k]["choice"]))
            cost[p].append((u[k]["step_ratio"], u[k]["cpu_s"] / one_cpu))
        policies_picks[BRUTE].append((*key, _pick_by_val(gt)))
        cost[BRUTE].append((sum(g["steps"] for g in gt.values()) / one_steps,
                            sum(g["cpu_s"] for g in gt.values()) / one_cpu))
        for c in CANDIDATES:
            policies_picks[f"always {c}"].append((*key, c))
            cost[f"always {c}"].append((1.0, gt[c]["cpu_s"] / one_cpu))
    regret = {p: [tasks[t]["best_mean"] - tasks[t]["mean_test_accuracy"][c] for t, _, c in rows]
              for p, rows in policies_picks.items()}
    policies = {}
    for p, rows in policies_picks.items():
        r = regret[p]
        policies[p] = {"within_1_point_count": sum(x <= 1.0 + 1e-9 for x in r), "task_seeds": len(r),
                       "within_1_point": sum(x <= 1.0 + 1e-9 for x in r) / len(r), "mean_regret": statistics.fmean(r),
                       "step_ratio": statistics.median(c[0] for c in cost[p]),
                       "step_ratio_max": max(c[0] for c in cost[p]),
                       "cpu_ratio": statistics.median(c[1] for c in cost[p]), "cpu_ratio_max": max(c[1] for c in cost[p]),
                       "picks": {f"{t}/{s}": c for t, s, c in rows}}
        if p != RACE:
            policies[p]["race_minus_this"] = t_interval([a - b for a, b in zip(regret[RACE], r)])
    per_task = {t: {"race_picks": [c for tt, _, c in policies_picks[RACE] if tt == t],
                    "race_larger_picks": [c for tt, _, c in policies_picks[RACE_LARGER] if tt == t],
                    "brute_picks": [c for tt, _, c in policies_picks[BRUTE] if tt == t]} for t in tasks}
    race = policies[RACE]
    fixed = [p for p in policies if p.startswith("always ")]
    goal = {"within_1_point_at_least_85pct": race["within_1_point"] >= 0.85,
            "regret_below_every_fixed_default": all(race["mean_regret"] < policies[p]["mean_regret"] for p in fixed),
            "regret_below_brute_force": race["mean_regret"] < policies[BRUTE]["mean_regret"],
            "median_cost_at_most_2x": race["step_ratio"] <= 2.0 + 1e-9}
    goal["met"] = all(goal.values())
    match = [abs(u[k]["test_accuracy"] - u["ground_truth"][u[k]["choice"]]["test_accuracy"]) < 1e-12
             for u in units for k in ("race", "race_larger")]
    return {"tasks": tasks, "policies": policies, "per_task": per_task, "goal": goal,
            "race_model_equals_its_standalone_training": all(match) if match else None}


def run_suite(task_seed_fn: Callable[[str, int, bool], dict], tasks: tuple[str, ...], seeds: tuple[int, ...],
              quick: bool, candidates: tuple[str, ...], recipe: dict, task_info: dict) -> dict:
    """Every task-seed of a suite (``task_seed_fn``, in ``$POSENC_BENCH_WORKERS`` processes) and its summary."""
    jobs = [(t, s) for s in seeds for t in tasks]
    load_before = os.getloadavg()
    units, workers, cpu = run_units(task_seed_fn, jobs, quick)
    unit_cpu = sum(g["cpu_s"] for u in units for g in [*u["ground_truth"].values(), u["race"], u["race_larger"]])
    return {"budget": BUDGET, "budget_larger": BUDGET_LARGER, "candidates": list(candidates), "recipe": recipe,
            "seeds": list(seeds), "task_info": {t: task_info[t] for t in tasks}, "units": units,
            "summary": summarise(units, candidates), "units_cpu_s": unit_cpu, "cpu_s": cpu, "workers": workers,
            "threads": 1, "loadavg_before": list(load_before), "loadavg_after": list(os.getloadavg())}


def run(quick: bool = False, *, tasks: tuple[str, ...] | None = None, seeds: tuple[int, ...] | None = None) -> dict:
    return run_suite(task_seed, tasks or (QUICK["tasks"] if quick else tuple(TASKS)),
                     seeds or (QUICK["seeds"] if quick else SEEDS), quick, CANDIDATES, _recipe(quick), TASKS)


def markdown(r: dict) -> str:
    """The tables of docs/search.md and the results page (``python -m benchmarks.tables``)."""
    from benchmarks.bench_choice import _fmt_ci
    from posenc.report.tables import markdown_table

    s = r["summary"]
    pol = s["policies"]
    n = pol[RACE]["task_seeds"]
    rows = []
    order = {RACE: 0, RACE_LARGER: 1, BRUTE: 2}
    for p, v in sorted(pol.items(), key=lambda kv: (order.get(kv[0], 3), kv[1]["mean_regret"])):
        rows.append([p, f"{v['within_1_point_count']}/{n}", f"{v['mean_regret']:.2f}",
                     _fmt_ci(v["race_minus_this"]) if "race_minus_this" in v else "—",
                     f"{v['step_ratio']:.2f} (max {v['step_ratio_max']:.2f})",
                     f"{v['cpu_ratio']:.2f} (max {v['cpu_ratio_max']:.2f})"])
    out = [f"{len(s['tasks'])} tasks, seeds {', '.join(map(str, r['seeds']))}: {n} task-seeds, budget {r['budget']:g} "
           f"(and {r['budget_larger']:g}), "
           f"candidates {', '.join(r['candidates'])}, {r['units_cpu_s'] / 60:.0f} min of CPU for the trainings. "
           "Regret: the best candidate's mean test accuracy minus the pick's (points); race minus policy: paired "
           "difference of regret (mean, 95 % t interval; negative: the race loses fewer points); cost: ratio to "
           "one stand-alone training, median (max):", "",
           markdown_table(["policy", "within 1 point", "mean regret", "race minus policy", "cost (steps)",
                           "cost (CPU)"], rows)]
    g = s["goal"]
    out += ["", "Goal for the race at budget 2: within 1 point on ≥ 85 % of task-seeds: "
            f"{'met' if g['within_1_point_at_least_85pct'] else 'missed'}; mean regret below every fixed default: "
            f"{'met' if g['regret_below_every_fixed_default'] else 'missed'}; below training all: "
            f"{'met' if g['regret_below_brute_force'] else 'missed'}; median cost ≤ 2 trainings: "
            f"{'met' if g['median_cost_at_most_2x'] else 'missed'}."]
    cands = r["candidates"]
    rows = []
    for t, info in s["tasks"].items():
        m = info["mean_test_accuracy"]
        gap = info["best_minus_none"]
        rows.append([t, r["task_info"][t]["kind"], *[f"**{m[c]:.1f}**" if c == info["best"] else f"{m[c]:.1f}"
                                                     for c in cands],
                     f"{_fmt_ci(gap)} ({'yes' if info['position_matters'] else 'not shown'})",
                     _count(s["per_task"][t]["race_picks"]), _count(s["per_task"][t]["race_larger_picks"])])
    out += ["", "Per task: mean test accuracy (%) of each candidate trained alone; whether position matters (best "
            "minus `none`, paired over the seeds, 95 % t interval); the races' picks over the seeds:", "",
            markdown_table(["task", "kind", *cands, "best − none", "race picks (budget 2)", "(budget 3)"], rows)]
    return "\n".join(out)


def _count(picks: list[str]) -> str:
    c: dict[str, int] = {}
    for p in picks:
        c[p] = c.get(p, 0) + 1
    return " ".join(f"{k}×{v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))
