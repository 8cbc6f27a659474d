"""Reproduction section ``search``: perturbation-based architecture selection (DARTS-PT).

Wang, Cheng, Chen, Tang and Hsieh, "Rethinking Architecture Selection in Differentiable NAS"
(ICLR 2021) claim that the magnitude of the architecture weights α does not measure an
operation's contribution to a DARTS supernet (magnitude drifts towards parameter-free ops
such as ``skip`` as the supernet trains), and select by perturbation instead. The section
tests both halves of that claim on supernets of **stacked** cells (the drift needs depth: a
single cell, where a skip edge cuts the only convolution on its path, cannot show it):

* **mechanism** — on the same supernets, magnitude's share of parameter-free ops at the last
  epoch minus PT's, and the growth of magnitude's share along training;
* **outcome** — every pick retrained from scratch with one recipe and one initial draw per
  supernet seed, PT − magnitude stand-alone test accuracy paired per seed (discretised
  supernets are never compared: PT tunes after its decisions and magnitude does not);
* **ground truth** where the space can be enumerated: every architecture trained alone.

Spaces (scikit-learn's ``load_digits``, 8×8): NAS-Bench-201-like cells stacked three deep
with shared α (``nb201``; quick and full), and DARTS cells with normal and reduction cells
over the RobustDARTS spaces S1–S4 (full). Every job is a pure function of a frozen config.
"""

from __future__ import annotations

import dataclasses

from posenc.experiments.profiles import profile_settings

from posenc.experiments.search._common import (
    MIN_PAIRS,
    PRUNED,
    SEP,
    SPLITS,
    VARIANTS,
    arch_choices,
    arch_key,
    digits_splits,
    plateaued,
    share,
)
from posenc.experiments.search.stacked import (
    RETRAIN_SEED,
    GroundTruthConfig,
    RetrainConfig,
    SpaceConfig,
    SupernetConfig,
    retrain,
    run_ground_truth,
    run_supernet,
    space_archs,
)
from posenc.experiments.search.summary import (
    ACC_SESOI,
    GATE,
    PARAM_FREE,
    SELECTORS,
    TIE_RULE,
    compare,
    compare_crossed,
    design,
    ground_truth,
    percentile,
    significance,
    summarize,
    summarize_space,
    tied_with_best,
)

__all__ = [
    "ACC_SESOI",

    "GATE",
    "MIN_PAIRS",
    "PARAM_FREE",
    "PRUNED",
    "RETRAIN_SEED",
    "SELECTORS",
    "SEP",
    "SPACES",
    "SPLITS",
    "TIE_RULE",
    "VARIANTS",
    "GroundTruthConfig",
    "RetrainConfig",
    "SpaceConfig",
    "SupernetConfig",
    "arch_choices",
    "arch_key",
    "compare",
    "compare_crossed",
    "design",
    "digits_splits",
    "ground_truth",
    "percentile",
    "plan",
    "plateaued",
    "retrain",
    "run_ground_truth",
    "run_supernet",
    "share",
    "significance",
    "space_archs",
    "space_profiles",
    "summarize",
    "summarize_space",
    "tied_with_best",
]


@dataclasses.dataclass(frozen=True)
class Profile:
    """One space of a profile: the supernet config (seed and variant are set per job), the
    supernet seeds and variants, and the ground-truth seeds (0: none) with architectures per job
    and their recipe (default: the supernet config's retraining recipe). Where the ground truth
    scores the picks, the supernet jobs need not retrain them (``retrain.epochs = 0``)."""

    supernet: SupernetConfig
    seeds: int
    variants: tuple[str, ...] = VARIANTS
    gt_seeds: int = 0
    per_job: int = 8
    gt_retrain: RetrainConfig | None = None


#: The spaces' supernets (seed, variant, epochs, checkpoints and retraining are set per profile from
#: ``profiles.toml``): three stacked NAS-Bench-201 cells of {skip, conv3x3} (8 architectures), and
#: the RobustDARTS spaces S1-S4 on DARTS cells (a normal and two reduction cells, 2 nodes).
SPACES: dict[str, SupernetConfig] = {
    "nb201": SupernetConfig(space="nb201", ops=("skip", "conv3x3"), num_cells=3, num_nodes=3, channels=8),
    **{s: SupernetConfig(space=s, ops=None, num_cells=3, num_nodes=2, channels=8) for s in ("s1", "s2", "s3", "s4")},
}


def space_profiles(name: str) -> dict[str, Profile]:
    """``{space: Profile}`` of profile ``name`` (``"quick"`` or ``"full"``), from ``profiles.toml``
    (:func:`posenc.experiments.profiles.profile_settings`)."""
    out = {}
    for space, p in profile_settings("search", name).items():
        if space not in SPACES:
            raise ValueError(f"profiles.toml: search.{name} names an unknown space {space!r}; known: {', '.join(SPACES)}")
        sup = dataclasses.replace(SPACES[space], epochs=p["epochs"], checkpoints=tuple(p["checkpoints"]),
                                  retrain=RetrainConfig(epochs=p["retrain_epochs"]))
        out[space] = Profile(sup, seeds=p["seeds"], variants=tuple(p["variants"]), gt_seeds=p.get("gt_seeds", 0),
                             per_job=p.get("per_job", 8),
                             gt_retrain=RetrainConfig(epochs=p["gt_epochs"]) if p.get("gt_seeds") else None)
    return out


def plan(profile: str, seeds: int | None = None) -> list:
    """The jobs of a profile (its spaces and numbers: :func:`space_profiles`); ``seeds`` sets the number
    of supernet seeds of every space.

    Per space: ``super.<space>.<darts|fixed>.s<seed>`` (a supernet with α trained or fixed,
    its selections and the retraining of its picks) and, where the space is enumerated,
    ``gt.<space>.b<k>.s<seed>`` (a batch of architectures trained alone).
    """
    from posenc.experiments.job import Job

    jobs = []
    profiles = space_profiles(profile)
    cost = {space: 1.0 if space.startswith("nb201") else 5.0 for space in profiles}
    # the NB201 spaces first (cheap), then the DARTS spaces seed-major, so that a run stopped
    # early has finished the cheap space and covers every DARTS space on its first seeds
    groups = [[s for s in profiles if s.startswith("nb201")], [s for s in profiles if not s.startswith("nb201")]]
    for group in groups:
        n_max = max((profiles[sp].seeds if seeds is None else seeds for sp in group), default=0)
        for s in range(n_max):
            for space in group:
                prof = profiles[space]
                if s < (prof.seeds if seeds is None else seeds):
                    for v in prof.variants:
                        cfg = dataclasses.replace(prof.supernet, variant=v, seed=s)
                        jobs.append(Job(f"super.{space}.{v}.s{s}", run_supernet, cfg, cost=cost[space]))
        for space in group:
            prof = profiles[space]
            if not prof.gt_seeds:
                continue
            sup = prof.supernet
            gt = GroundTruthConfig(space=sup.space, ops=sup.ops, num_cells=sup.num_cells, num_nodes=sup.num_nodes,
                                   channels=sup.channels, data_seed=sup.data_seed,
                                   retrain=prof.gt_retrain or sup.retrain)
            _, archs = space_archs(gt)
            for s in range(prof.gt_seeds):
                for b in range(0, len(archs), prof.per_job):
                    cfg = dataclasses.replace(gt, archs=tuple(archs[b:b + prof.per_job]), seed=s)
                    jobs.append(Job(f"gt.{space}.b{b // prof.per_job}.s{s}", run_ground_truth, cfg,
                                    cost=0.15 * len(cfg.archs) * cost[space]))
    return jobs
