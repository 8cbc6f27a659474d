"""Tiny versions of every kind of job the reproduction sections plan (for plumbing tests).

``tiny_jobs(section)`` takes the jobs of the section's quick and full plans, one or two of each
kind (job function and config type), and shrinks their configs so that each runs in well under a
second: the same code paths as the real jobs, on toy sizes. Importable by worker processes (the
tests put this folder on ``sys.path``).
"""

from __future__ import annotations

import dataclasses

from posenc.experiments.job import Job

#: config type name -> the fields that make a job of that kind tiny
TINY: dict[str, dict] = {
    "TheoryConfig": dict(num_points=32, num_features=64, sigmas=(0.01, 0.05), sample_counts=(16, 32),
                         rff_features=(16, 32)),
    "EmbeddersConfig": dict(num_features=64, sample_counts=(1, 2, 4)),
    "Fit1DConfig": dict(length=64, num_rows=1, iters=15),
    "Fit2DConfig": dict(size=16, iters=8, hidden=16),
    "ApproxConfig": dict(dim=8, features=(8, 16), norms=(1.0,), pairs=16, draws=2, n=16),
    "NumericsConfig": dict(n=32, ranges=(0.0, 5.0)),
    "SpeedConfig": dict(lengths=(64,), repeats=1, dense_max=64, head_dim=16, features=8),
    "TrainConfig": dict(length=8, steps=4, batch=4, eval_batches=1, embed_dim=16, features=8),
    "GIRConfig": dict(epochs=4, eval_every=2, num_anchors=8, hidden=8),
    "LengthConfig": dict(steps=4, batch=4, eval_batch=8, test_factors=(1, 2), dim=16),
    "RopeLengthConfig": dict(steps=4, batch=4, eval_batch=8, test_factors=(1, 2), dim=16),
    "ResolutionConfig": dict(steps=6, eval_every=2, dim=16, heads=2),
    "DigitsConfig": dict(steps=6, eval_every=2, dim=16, hidden=16),
    "GridConfig": dict(steps=6, eval_every=2, eval_samples=16, test_grids=(9,), dim=16, hidden=16),
    "SupernetConfig": dict(channels=4, epochs=2, checkpoints=(1, 2), proj_intv=1, subset=96),
    "GroundTruthConfig": dict(channels=4, subset=64),
}


def _shrink(job: Job) -> Job:
    kind = type(job.config).__name__
    over = dict(TINY[kind])
    cfg = job.config
    if kind in ("SupernetConfig", "GroundTruthConfig"):
        over["retrain"] = dataclasses.replace(cfg.retrain, epochs=min(cfg.retrain.epochs, 1))
        if kind == "GroundTruthConfig":
            over["archs"] = cfg.archs[:2]
        if kind == "SupernetConfig" and cfg.space != "nb201":
            over["num_nodes"] = 2
    if kind == "ResolutionConfig" and "test_res" in over:
        pass
    return dataclasses.replace(job, config=dataclasses.replace(cfg, **{k: v for k, v in over.items()
                                                                          if hasattr(cfg, k)}))


def tiny_jobs(section: str, per_kind: int = 2, profiles: tuple[str, ...] = ("quick", "full")) -> list[Job]:
    """Up to ``per_kind`` tiny jobs of every kind in the section's plans (quick first), in plan order."""
    from posenc.report.registry import get_section

    seen: dict[tuple, int] = {}
    keys: set[str] = set()
    out = []
    for profile in profiles:
        for job in get_section(section).plan(profile, None):
            kind = (job.run.__module__, job.run.__name__, type(job.config).__name__)
            if seen.get(kind, 0) >= per_kind or job.key in keys:
                continue
            seen[kind] = seen.get(kind, 0) + 1
            keys.add(job.key)
            out.append(_shrink(job))
    return out
