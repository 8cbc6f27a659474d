"""Choosing a graph model's node encoding (area ``graph_families``): ``choose_encoding(candidates=GRAPH_CANDIDATES)``.

The setting is frozen in :mod:`benchmarks.graph_family_tasks` (4 node-classification tasks on
generated graphs, a plain PyG ``GCNConv`` model, one recipe, seeds 0-4, the candidates none,
Laplacian eigenvectors, random walk and anchors). As ``python -m benchmarks families`` does for
sequences: ground truth from every candidate trained stand-alone with the recipe and the seed
(:func:`posenc.search.with_encoding`, :func:`posenc.search.train_network`), scored on the test
nodes; the race (``choose_encoding`` at budget 2, and at budget 3) from the same initial model; the
fixed policies read off the ground truth. The summary and its tables are those of
:mod:`benchmarks.bench_families`.

``POSENC_BENCH_WORKERS=2`` runs task-seeds in two processes (each at one thread);
``POSENC_BENCH_CACHE=DIR`` keeps each finished task-seed in DIR and reuses it.
"""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.bench_choice import cached
from benchmarks.bench_families import BUDGET, BUDGET_LARGER, _race, _standalone, run_suite
from benchmarks.graph_family_tasks import CANDIDATES, DIM, RECIPE, SEEDS, TASKS, build_model, load_task

#: Tasks and length of the quick (smoke) run.
QUICK = {"tasks": ("caves", "cycle-length"), "seeds": (0, 1), "steps": 120}


def _recipe(quick: bool) -> dict[str, Any]:
    return {**RECIPE, "steps": QUICK["steps"]} if quick else dict(RECIPE)


#: Where the candidates go in :class:`~benchmarks.graph_family_tasks.PlainGCN` (its node features are 32 wide;
#: choose_encoding reads the width off a forward pass).
WHERE = {"encoding_at": "pos", "dim": DIM}
RACE_WHERE = {"encoding_at": "pos"}


def task_seed(name: str, seed: int, quick: bool = False) -> dict[str, Any]:
    """Ground truth and the races on one task and seed (one thread), cached."""
    return cached(f"graph_families.{name}.{seed}{'.quick' if quick else ''}", lambda: _task_seed(name, seed, quick))


def _task_seed(name: str, seed: int, quick: bool) -> dict[str, Any]:
    torch.set_num_threads(1)
    task = load_task(name, seed)
    recipe = _recipe(quick)
    gt = {c: _standalone(task, seed, c, recipe, build_model, WHERE) for c in CANDIDATES}
    race = {k: _race(task, seed, recipe, b, build_model, CANDIDATES, RACE_WHERE)
            for k, b in (("race", BUDGET), ("race_larger", BUDGET_LARGER))}
    return {"task": name, "seed": seed, "ground_truth": gt, **race}


def run(quick: bool = False, *, tasks: tuple[str, ...] | None = None, seeds: tuple[int, ...] | None = None) -> dict:
    return run_suite(task_seed, tasks or (QUICK["tasks"] if quick else tuple(TASKS)),
                     seeds or (QUICK["seeds"] if quick else SEEDS), quick, CANDIDATES, _recipe(quick), TASKS)


def markdown(r: dict) -> str:
    """The tables of docs/search.md and the results page (those of :mod:`benchmarks.bench_families`)."""
    from benchmarks.bench_families import markdown as families_markdown

    return families_markdown(r)
