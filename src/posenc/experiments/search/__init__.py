"""Reproduction section ``search``: perturbation-based architecture selection (DARTS-PT).

Wang, Cheng, Chen, Tang and Hsieh, "Rethinking Architecture Selection in
Differentiable NAS" (ICLR 2021) claim that the magnitude of the architecture
weights α does not measure an operation's contribution to a DARTS supernet, and
select by perturbation instead: on each edge (in a random order), mask each op
in turn, keep the one whose removal hurts the supernet's validation loss most,
discretise, fine-tune, go on. They report that magnitude selection drifts
towards parameter-free ops (``skip``, ``none``) as the supernet trains, while
perturbation selection stays good, even with α frozen at uniform.

No NAS benchmark table can be downloaded here, so the ground truth is built:

* a micro search space (a cell of ``nodes`` nodes whose every edge mixes the
  ``ops``) small enough to train **every** architecture stand-alone on
  scikit-learn's ``load_digits`` (train / validation / test splits fixed by
  ``data_seed``), on several seeds (jobs ``gt.*``, one per batch of
  architectures and seed, so ``--shard i/n`` splits them);
* supernets (jobs ``super.*``) trained with first-order DARTS (α trained on the
  validation split, ``darts``) or with α frozen at uniform (``fixed``), one per
  supernet seed; at several epochs each is copied and its architecture is
  selected by magnitude and by perturbation (random edge order drawn from the
  seed); the summary looks up each selection's ground-truth test accuracy and
  percentile;
* the positional-encoding search (jobs ``pe.*``): the testbed transformer with a
  mixed edge over input encodings on a task where position matters; each
  candidate trained alone is the ground truth.

Run functions are pure: a frozen config in, a JSON-serialisable dict out.
"""

from __future__ import annotations

import dataclasses

from posenc.experiments.search._common import (
    MIN_PAIRS,
    SEP,
    SPLITS,
    VARIANTS,
    arch_of,
    choices_of,
    digits_splits,
    edge_names,
    fit,
    plateaued,
    space_archs,
)
from posenc.experiments.search.micro import (
    DigitsCellNet,
    GroundTruthConfig,
    SupernetConfig,
    run_ground_truth,
    run_supernet,
)
from posenc.experiments.search.pe import PEAloneConfig, PESearchConfig, pe_archs, pe_edges, run_pe_alone, run_pe_search
from posenc.experiments.search.summary import (
    PARAM_FREE,
    SELECTORS,
    arch_key,
    compare,
    ground_truth,
    micro_claims,
    percentile,
    selections,
    significance,
    summarize,
    summarize_micro,
    summarize_pe,
)


# ------------------------------------------------------------------ plan
QUICK_GT = GroundTruthConfig()
QUICK_SUPER = SupernetConfig()
QUICK_PE_GT = PEAloneConfig()
QUICK_PE = PESearchConfig()
FULL_OPS = ("none", "skip", "conv1x1", "conv3x3", "avgpool")
FULL_GT = GroundTruthConfig(ops=FULL_OPS, epochs=15)
FULL_SUPER = SupernetConfig(ops=FULL_OPS, epochs=20, checkpoints=(2, 5, 10, 20))
FULL_PE_ENC = ("none", "sinusoidal", "learned_table", "lff", "cape")
FULL_PE_ATT = ("plain", "rope_axial")
FULL_PE_GT = PEAloneConfig(encodings=FULL_PE_ENC, attention=FULL_PE_ATT, epochs=40)
FULL_PE = PESearchConfig(encodings=FULL_PE_ENC, attention=FULL_PE_ATT, epochs=40)
#: profile -> (ground-truth seeds, architectures per job, supernet seeds, PE ground-truth seeds, PE search seeds)
PROFILE_SIZES = {"quick": (1, 9, 4, 1, 2), "full": (3, 25, 20, 3, 10)}


def plan(profile: str, seeds: int | None = None) -> list:
    """The jobs of a profile; ``seeds`` sets the number of supernet seeds (micro and PE space).

    quick: 27 architectures ({none, skip, conv3x3} on 3 edges) x 1 seed, 10 epochs; 4 supernet
    seeds per variant, selections at epochs 2, 5, 10; the PE space over 4 encodings (attention
    plain) trained alone on 1 seed and searched on 2 seeds. full: 125 architectures (5 ops) x 3
    seeds, 15 epochs; 20 supernet seeds of 20 epochs (selections at 2, 5, 10, 20); the PE space
    over 5 encodings x {plain, axial RoPE} per block (20 architectures) x 3 seeds, searched on 10.
    """
    from posenc.experiments.job import Job

    if profile == "quick":
        gt, sup, pe_gt, pe = QUICK_GT, QUICK_SUPER, QUICK_PE_GT, QUICK_PE
    elif profile == "full":
        gt, sup, pe_gt, pe = FULL_GT, FULL_SUPER, FULL_PE_GT, FULL_PE
    else:
        raise ValueError(f"profile must be 'quick' or 'full', got {profile!r}")
    gt_seeds, per_job, n_super, pe_gt_seeds, n_pe = PROFILE_SIZES[profile]
    if seeds is not None:
        n_super, n_pe = seeds, seeds
    archs = space_archs(gt.ops, gt.num_nodes)
    jobs = []
    for s in range(gt_seeds):
        for b in range(0, len(archs), per_job):
            cfg = dataclasses.replace(gt, archs=tuple(archs[b:b + per_job]), seed=s)
            jobs.append(Job(f"gt.b{b // per_job}.s{s}", run_ground_truth, cfg, cost=len(cfg.archs) / 9))
    for s in range(n_super):
        for v in VARIANTS:
            jobs.append(Job(f"super.{v}.s{s}", run_supernet, dataclasses.replace(sup, variant=v, seed=s), cost=1.0))
    for s in range(pe_gt_seeds):
        for a in pe_archs(pe_gt.encodings, pe_gt.attention, pe_gt.depth):
            cfg = dataclasses.replace(pe_gt, arch=a, seed=s)
            jobs.append(Job(f"pe_gt.{a.replace(SEP, '-')}.s{s}", run_pe_alone, cfg, cost=1.0))
    for s in range(n_pe):
        for v in VARIANTS:
            jobs.append(Job(f"pe.{v}.s{s}", run_pe_search, dataclasses.replace(pe, variant=v, seed=s),
                            cost=3.0 if v == "darts" else 1.5))
    return jobs
