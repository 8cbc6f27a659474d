"""``choose_encoding``'s race against Optuna's successive-halving pruner (area ``optuna``).

What a user would write instead of ``choose_encoding``: an Optuna study over a categorical
``encoding`` (a :class:`optuna.samplers.GridSampler`, so that each of the four candidates is
tried once, in the order the sampler draws from its seed), each trial the stand-alone training
of the model with that encoding (``train_network`` with the recipe, the same call the race and
the ground truth make), reporting the validation accuracy at the rungs of a
:class:`optuna.pruners.SuccessiveHalvingPruner` (first rung at a quarter of the training,
reduction factor 2: the race's rungs at ``budget=2``) and stopped when the pruner says so; the
pick is the study's best trial (the best final validation accuracy; Optuna breaks ties by the
earlier trial). Trials run one after another, as a user's script runs them on one machine, so
the pruner compares each trial with the trials before it (Optuna's asynchronous rule).

The setting is :mod:`benchmarks.choice_tasks`' (10 tasks, one recipe, seeds 0-4), frozen before
either selector was tuned. For every task-seed: the ground truth (every candidate trained
alone), the race (``choose_encoding(budget=2)``, the default selector) and the Optuna study,
from the same initial model. Per policy: the share of task-seeds within 1 point of the best
candidate, the mean regret (as in ``benchmarks/bench_choice.py``), the paired difference of
regret, the cost as a ratio to one stand-alone training (steps, an evaluation batch counting a
third of a step as ``choose_encoding`` counts it; and CPU time) and how often the two pick the
same candidate. Optuna's completed trials are checked to equal their stand-alone trainings.

Needs ``optuna`` (the ``bench`` extra). ``POSENC_BENCH_WORKERS=2`` runs task-seeds in two
processes (one thread each); ``POSENC_BENCH_CACHE=DIR`` keeps each finished task-seed.
"""

from __future__ import annotations

import ast
import inspect
import math
import os
import statistics
import textwrap
import time
from typing import Any

import torch

from benchmarks.bench_choice import BUDGET, QUICK, _pick_by_val, _selector, _standalone, cached, run_units, t_interval
from benchmarks.choice_tasks import CANDIDATES, RECIPE, SEEDS, TASKS, build_model, load_task
from posenc.search import evaluate, mixed_ops, train_network
from posenc.search.choose import EVAL_COST

#: Evaluation batch size of ``evaluate`` (its default), for the cost of a validation pass.
EVAL_BATCH: int = inspect.signature(evaluate).parameters["batch_size"].default
POLICIES = ("race (choose_encoding)", "Optuna successive halving", "train all, pick by validation")


def optuna_choose(task: dict, seed: int, length: dict, rung_steps: int, log: dict) -> str:
    """The encoding an Optuna study with a successive-halving pruner picks (what a user writes)."""
    import optuna

    def objective(trial):
        name = trial.suggest_categorical("encoding", list(CANDIDATES))
        model = build_model(task, seed)
        mixed_ops(model)["pos"].discretize(name)
        rec = log.setdefault(name, {"steps": 0, "evals": 0})

        def report(step, total, info):
            rec["steps"] = step
            rung = step // rung_steps
            if step % rung_steps == 0 and rung & (rung - 1) == 0 and step < total:  # rungs at r, 2r, 4r, ...: report
                rec["evals"] += 1
                trial.report(evaluate(model, task["val"])[1], step)
                if trial.should_prune():
                    raise optuna.TrialPruned()

        train_network(model, task["train"], seed=seed, progress=report, **length, **RECIPE)
        rec["evals"] += 1
        val_loss, val_acc = evaluate(model, task["val"])
        rec.update(val_accuracy=val_acc, val_loss=val_loss, completed=True)
        return val_acc

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.GridSampler({"encoding": list(CANDIDATES)}, seed=seed),
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=rung_steps, reduction_factor=2))
    study.optimize(objective, n_trials=len(CANDIDATES))
    return study.best_trial.params["encoding"]


def code_lines(fn) -> int:
    """Lines of code of ``fn`` (its definition; docstring, comments and blank lines left out)."""
    source = textwrap.dedent(inspect.getsource(fn))
    tree = ast.parse(source)
    doc = ast.get_docstring(tree.body[0], clean=False)
    lines = [ln.split("#")[0].rstrip() for ln in source.splitlines()]
    lines = [ln for ln in lines if ln.strip()]
    return len(lines) - (len(doc.splitlines()) if doc else 0)


def task_seed(name: str, seed: int, quick: bool = False) -> dict[str, Any]:
    """Ground truth, the race and the Optuna study on one task and seed (one thread), cached
    (``benchmarks.bench_choice.cached``)."""
    return cached(f"optuna.{name}.{seed}{'.quick' if quick else ''}", lambda: _task_seed(name, seed, quick))


def _val_batches(task: dict) -> int:
    return math.ceil(len(task["val"][1]) / EVAL_BATCH)


def _task_seed(name: str, seed: int, quick: bool) -> dict[str, Any]:
    torch.set_num_threads(1)
    task = load_task(name, subset=QUICK["subset"] if quick else None)
    length = {"steps": QUICK["steps"]} if quick else {"epochs": task["epochs"]}
    gt = {c: _standalone(task, seed, c, length) for c in CANDIDATES}
    race = _selector(task, seed, "race", length)
    total = gt[CANDIDATES[0]]["steps"]
    rung = max(1, total // 4)
    log: dict[str, dict] = {}
    c0 = time.process_time()
    pick = optuna_choose(task, seed, length, rung, log)
    cpu = time.process_time() - c0
    steps = sum(r["steps"] + r["evals"] * _val_batches(task) * EVAL_COST for r in log.values())
    same = all(abs(r["val_accuracy"] - gt[c]["val_accuracy"]) < 1e-12 for c, r in log.items() if r.get("completed"))
    return {"task": name, "seed": seed, "ground_truth": gt, "race": race,
            "optuna": {"choice": pick, "steps": steps, "step_ratio": steps / total, "cpu_s": cpu, "trials": log,
                       "rung_steps": rung, "completed_equal_standalone": same,
                       "test_accuracy": gt[pick]["test_accuracy"]}}


def summarise(units: list[dict[str, Any]]) -> dict[str, Any]:
    by_task: dict[str, list[dict]] = {}
    for u in units:
        by_task.setdefault(u["task"], []).append(u)
    means = {t: {c: 100 * statistics.fmean(u["ground_truth"][c]["test_accuracy"] for u in us) for c in CANDIDATES}
             for t, us in by_task.items()}
    best = {t: max(m.values()) for t, m in means.items()}
    picks: dict[str, list[tuple[str, str]]] = {p: [] for p in POLICIES}
    cost: dict[str, list[tuple[float, float]]] = {p: [] for p in POLICIES}
    for u in units:
        gt = u["ground_truth"]
        one_cpu = statistics.fmean(g["cpu_s"] for g in gt.values())
        one_steps = statistics.fmean(g["steps"] for g in gt.values())
        for p, r in ((POLICIES[0], u["race"]), (POLICIES[1], u["optuna"])):
            picks[p].append((u["task"], r["choice"]))
            cost[p].append((r["step_ratio"], r["cpu_s"] / one_cpu))
        picks[POLICIES[2]].append((u["task"], _pick_by_val(gt)))
        cost[POLICIES[2]].append((sum(g["steps"] for g in gt.values()) / one_steps,
                                  sum(g["cpu_s"] for g in gt.values()) / one_cpu))
    regret = {p: [best[t] - means[t][c] for t, c in rows] for p, rows in picks.items()}
    policies = {p: {"within_1_point_count": sum(x <= 1.0 + 1e-9 for x in regret[p]), "task_seeds": len(regret[p]),
                    "mean_regret": statistics.fmean(regret[p]),
                    "step_ratio": statistics.median(c[0] for c in cost[p]),
                    "step_ratio_max": max(c[0] for c in cost[p]),
                    "cpu_ratio": statistics.median(c[1] for c in cost[p])} for p in POLICIES}
    race, opt = POLICIES[0], POLICIES[1]
    return {"policies": policies,
            "race_minus_optuna_regret": t_interval([a - b for a, b in zip(regret[race], regret[opt])]),
            "same_pick": sum(a[1] == b[1] for a, b in zip(picks[race], picks[opt])),
            "optuna_completed_trials_equal_standalone": all(u["optuna"]["completed_equal_standalone"] for u in units),
            "optuna_trials_completed_mean": statistics.fmean(
                sum(bool(r.get("completed")) for r in u["optuna"]["trials"].values()) for u in units),
            "code_lines": {"optuna": code_lines(optuna_choose), "race": 1}}


def run(quick: bool = False, *, tasks: tuple[str, ...] | None = None, seeds: tuple[int, ...] | None = None) -> dict:
    tasks = tasks or (QUICK["tasks"] if quick else tuple(TASKS))
    seeds = seeds or (QUICK["seeds"] if quick else SEEDS)
    jobs = [(t, s) for s in seeds for t in tasks]
    load_before = os.getloadavg()
    units, workers, _ = run_units(task_seed, jobs, quick)
    import optuna

    return {"budget": BUDGET, "candidates": list(CANDIDATES), "recipe": RECIPE, "seeds": list(seeds),
            "tasks": list(tasks), "optuna": optuna.__version__, "units": units, "summary": summarise(units),
            "workers": workers, "threads": 1, "loadavg_before": list(load_before),
            "loadavg_after": list(os.getloadavg())}


def markdown(r: dict) -> str:
    s = r["summary"]
    n = len(r["units"])
    rows = ["| policy | within 1 point | mean regret (points) | cost, median (steps) | cost, max (steps) | "
            "cost, median (CPU) |", "|---|---|---|---|---|---|"]
    for p in POLICIES:
        q = s["policies"][p]
        rows.append(f"| {p} | {q['within_1_point_count']}/{q['task_seeds']} | {q['mean_regret']:.2f} | "
                    f"{q['step_ratio']:.2f} | {q['step_ratio_max']:.2f} | {q['cpu_ratio']:.2f} |")
    d = s["race_minus_optuna_regret"]
    interval = "" if d["low"] is None else f" [{d['low']:+.2f}, {d['high']:+.2f}]"
    return "\n".join([
        f"{len(r['tasks'])} tasks × seeds {', '.join(map(str, r['seeds']))} ({n} task-seeds), candidates "
        f"{', '.join(r['candidates'])}, Optuna {r['optuna']}; costs as ratios to one stand-alone training:", "",
        *rows, "",
        f"Regret of the race minus Optuna's, paired per task-seed: {d['mean']:+.2f} points{interval}. Same pick on "
        f"{s['same_pick']}/{n} task-seeds; Optuna completed {s['optuna_trials_completed_mean']:.1f} of 4 trials on "
        f"average, and its completed trials equal their stand-alone trainings: "
        f"{'yes' if s['optuna_completed_trials_equal_standalone'] else 'no'}. Code: the Optuna study takes "
        f"{s['code_lines']['optuna']} lines (`optuna_choose` in `benchmarks/bench_optuna.py`), the race one call.", ""])
