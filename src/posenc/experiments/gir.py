"""Reproduction section ``gir``: GIR vs P-GNN vs standard GNNs on P-GNN's position-aware tasks.

Protocol (P-GNN, You et al. 2019, and its official code): Adam,
lr 0.01 divided by 10 at epoch 200, weight decay 5e-4, hidden 32, dropout 0.5,
2 layers, inner-product decoder on L2-normalised embeddings, binary
cross-entropy, ROC AUC on the test pairs at the epoch of best validation AUC
(evaluated every 10 epochs). P-GNN's anchor sets are redrawn at every training
step and every evaluation; GIR's anchors are drawn once per run. P-GNN rows use
the configuration of the official code that produced the paper's numbers (learned
distance map, xavier/ReLU-gain initialisation; ``GIRConfig.pgnn_dist_trainable``,
``pgnn_init``).

The "full" profile trains 2001 epochs as in the paper. The "quick" profile is
short (100 epochs, three settings; ``profiles.toml``): its runs are read by the
convergence gate like every other, and its numbers are not the paper's protocol.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from posenc.data.graphs import PairTask, link_prediction_task, pairwise_task, sample_negatives
from posenc.graph._validate import adjacency_csr
from posenc.graph.anchors import bourgain_anchor_sets, select_anchors
from posenc.graph.distances import anchor_distances
from posenc.graph.gir import GIR, build_path_plan
from posenc.graph.models import GNN_KINDS, FusedGIR, StandardGNN
from posenc.graph.pgnn import PGNN, pgnn_anchor_inputs
from posenc.experiments.gate import FAILED, LEARNING, Gate
from posenc.experiments.stats import (
    CONTRADICTED,
    HOLDS,
    NOT_CONFIRMED,
    NOT_DECIDED,
    holm_verdicts,
    mean_std,
    paired_difference,
)
from posenc.experiments.job import Job
from posenc.experiments.profiles import profile_settings

TASKS = ("grid-link", "communities-link", "communities-pair")
GIR_MODELS = {"gir": "path", "gir-indication": "indication", "gir-distance": "distance"}
MODELS = (*GNN_KINDS, "pgnn-f", "pgnn-e", *GIR_MODELS, *(f"{k}+gir" for k in GNN_KINDS))


@dataclass(frozen=True)
class GIRConfig:
    """One training run.

    Args:
        task: ``"grid-link"``, ``"communities-link"`` or ``"communities-pair"``.
        transductive: one-hot features (``-T``) instead of constant ones.
        model: one of :data:`MODELS`.
        seed: graph, split, anchors, initialisation and negatives.
        epochs: training epochs (paper: 2001).
        num_anchors: GIR anchors (random single nodes by default).
        anchor_method: ``"random"``, ``"degree"`` or ``"bourgain"`` (GIR).
        pgnn_q: hop cutoff of P-GNN-F.
        pgnn_dist_trainable: P-GNN's learned distance map ``s -> Linear -> ReLU -> Linear``
            (the official code's default, which produced the paper's numbers).
        pgnn_init: ``"official"`` (xavier_uniform, ReLU gain, zero biases, as the official
            code) or ``"torch"`` (``nn.Linear``'s default) for the P-GNN layers.
        gir_rounds: rounds of the ``gir-indication`` variant (None: deepest BFS level).
        threads: torch threads inside the job.
    """

    task: str
    transductive: bool
    model: str
    seed: int
    epochs: int = 2001
    lr: float = 0.01
    lr_drop_epoch: int = 200
    weight_decay: float = 5e-4
    hidden: int = 32
    layers: int = 2
    dropout: float = 0.5
    eval_every: int = 10
    num_anchors: int = 64
    anchor_method: str = "random"
    pgnn_q: int = 2
    pgnn_dist_trainable: bool = True
    pgnn_init: str = "official"
    gir_rounds: int | None = None
    threads: int = 1


def make_task(config: GIRConfig) -> PairTask:
    if config.task == "grid-link":
        return link_prediction_task("grid", config.transductive, config.seed)
    if config.task == "communities-link":
        return link_prediction_task("communities", config.transductive, config.seed)
    if config.task == "communities-pair":
        return pairwise_task(config.seed, config.transductive)
    raise ValueError(f"task must be one of {TASKS}, got {config.task!r}")


def _auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels.numpy(), scores.numpy()))


class _Embedder:
    """Builds the model of ``config`` and returns embeddings for the current step."""

    def __init__(self, config: GIRConfig, task: PairTask) -> None:
        self.config, self.task = config, task
        n, f = task.x.shape
        self.kind = config.model
        self.pgnn_gen = torch.Generator().manual_seed(config.seed + 7919)
        if self.kind.startswith("pgnn"):
            self.adj = adjacency_csr(task.edge_index, n)
            self.q = config.pgnn_q if self.kind == "pgnn-f" else None
            self.model = PGNN(
                f,
                config.hidden,
                config.layers,
                dropout=config.dropout,
                dist_trainable=config.pgnn_dist_trainable,
                init=config.pgnn_init,
            )
            return
        needs_gir = self.kind in GIR_MODELS or self.kind.endswith("+gir")
        if needs_gir:
            sets = select_anchors(
                config.anchor_method, task.edge_index, n, config.num_anchors, generator=config.seed
            )
            self.dist = anchor_distances(task.edge_index, n, sets)
            self.plan = build_path_plan(task.edge_index, self.dist)
            variant = GIR_MODELS.get(self.kind, "path")
            gir = GIR(f, config.hidden, variant=variant, readout="anchor", rounds=config.gir_rounds)
        if self.kind in GIR_MODELS:
            self.model = gir
        else:
            gnn_kind = self.kind.split("+")[0]
            gnn = StandardGNN(gnn_kind, f, config.hidden, config.hidden, config.layers, dropout=config.dropout)
            self.model = FusedGIR(gnn, gir) if needs_gir else gnn

    def __call__(self) -> torch.Tensor:
        x, ei = self.task.x, self.task.edge_index
        if self.kind.startswith("pgnn"):
            sets = bourgain_anchor_sets(x.shape[0], generator=self.pgnn_gen)
            weight, index = pgnn_anchor_inputs(self.adj, sets, q=self.q)
            return self.model(x, weight, index)
        if isinstance(self.model, StandardGNN):
            return self.model(x, ei)
        return self.model(x, ei, self.dist, self.plan)


def _scores(z: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    z = F.normalize(z, p=2, dim=-1)
    return (z[pairs[0]] * z[pairs[1]]).sum(-1)


def run_gir(config: GIRConfig) -> dict:
    """Train one model on one task; return validation/test ROC AUC and timings (pure)."""
    if config.model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {config.model!r}")
    torch.set_num_threads(config.threads)
    t0 = time.perf_counter()
    with torch.random.fork_rng():
        torch.manual_seed(config.seed)
        task = make_task(config)
        emb = _Embedder(config, task)
        model = emb.model
        opt = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, [config.lr_drop_epoch], gamma=0.1)
        rng = np.random.default_rng(config.seed + 104729)
        n = task.num_nodes
        val_pairs = torch.cat([task.val_pos, task.val_neg], 1)
        val_y = torch.cat([torch.ones(task.val_pos.shape[1]), torch.zeros(task.val_neg.shape[1])])
        test_pairs = torch.cat([task.test_pos, task.test_neg], 1)
        test_y = torch.cat([torch.ones(task.test_pos.shape[1]), torch.zeros(task.test_neg.shape[1])])
        best = {"val_auc": -1.0, "test_auc": float("nan"), "epoch": -1}
        curve = []
        setup_s = time.perf_counter() - t0
        for epoch in range(config.epochs):
            model.train()
            opt.zero_grad()
            neg = sample_negatives(task.train_pos.shape[1], n, task.forbidden, rng)
            pairs = torch.cat([task.train_pos, neg], 1)
            y = torch.cat([torch.ones(task.train_pos.shape[1]), torch.zeros(neg.shape[1])])
            loss = F.binary_cross_entropy_with_logits(_scores(emb(), pairs), y)
            loss.backward()
            opt.step()
            sched.step()
            if epoch % config.eval_every == 0 or epoch == config.epochs - 1:
                model.eval()
                with torch.no_grad():
                    z = emb()
                    val_auc = _auc(_scores(z, val_pairs), val_y)
                    test_auc = _auc(_scores(z, test_pairs), test_y)
                curve.append([epoch, round(val_auc, 4), round(test_auc, 4)])
                if val_auc > best["val_auc"]:
                    best = {"val_auc": val_auc, "test_auc": test_auc, "epoch": epoch}
    seconds = time.perf_counter() - t0
    return {
        "task": config.task,
        "transductive": config.transductive,
        "model": config.model,
        "seed": config.seed,
        "val_auc": best["val_auc"],
        "test_auc": best["test_auc"],
        "best_epoch": best["epoch"],
        "final_loss": float(loss.detach()),
        "epochs": config.epochs,
        **(
            {"pgnn_dist_trainable": config.pgnn_dist_trainable, "pgnn_init": config.pgnn_init}
            if config.model.startswith("pgnn")
            else {}
        ),
        "setup_seconds": setup_s,
        "seconds": seconds,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "curve": curve,
    }


def _setting(task: str, transductive: bool) -> str:
    return f"{task}-{'T' if transductive else 'I'}"


#: "At least as good" allows this AUC shortfall (ties at the 1.0 ceiling differ by ~1e-5).
TIE_TOL = 0.005
#: "Fusion beats both branches" needs a margin above the better branch (AUC).
FUSION_MARGIN = 0.005
#: The convergence gate (:mod:`posenc.experiments.gate`). The claims read the test AUC at the best
#: validation epoch (the model the validation set selects), so the gate reads the best-so-far
#: validation AUC, for the plateau and for chance alike: a run has converged when its best validation
#: AUC rose by at most 0.02 during the last third of training (P-GNN's validation AUC jumps with its
#: resampled anchors, so a line through the raw tail would read noise as learning); it failed to
#: learn when its best validation AUC stays within 0.1 of chance (0.5, a random scorer's AUC; a
#: chance-level model's evaluations scatter by up to ~0.1 on these validation sets, and one lucky
#: evaluation is not learning). A model whose validation AUC peaked and then fell back has learned
#: what the claim reads (its best epoch), not failed.
GATE = Gate("validation ROC AUC (best so far)", chance=0.5, learned=0.1, tol=0.02, running_best=True)


def best_so_far(curve: list) -> list[list[float]]:
    """``[[epoch, best validation AUC up to that evaluation], ...]`` of a run's ``curve``."""
    out: list[list[float]] = []
    best = None
    for point in curve:
        v = point[1]
        if v is not None and math.isfinite(v):
            best = v if best is None else max(best, v)
        out.append([point[0], best])
    return out


def run_state(result: dict) -> str:
    """The gate's reading of a run (:data:`GATE` on its best-so-far validation curve)."""
    return GATE.read(best_so_far(result.get("curve", [])))


#: Rounds of the unrestricted "indication" variant in the experiments (its cost is K*n*H per round).
INDICATION_ROUNDS = 10


def plan(profile: str, seeds: int | None = None) -> list[Job]:
    """Jobs of the ``gir`` section: per setting of the profile's ``runs`` in ``profiles.toml``
    (:func:`posenc.experiments.profiles.profile_settings`), each listed model (``"all"``: every
    model) on its seeds, for the profile's epochs (``seeds`` overrides every setting's seeds).
    quick: Grid-I link, Communities pairwise and Grid-T, 100 epochs; full: the paper's 2001 epochs
    on five settings. Jobs are independent: ``posenc reproduce gir --profile full --shard i/n``
    splits them."""
    settings = profile_settings("gir", profile)
    jobs = []
    for run in settings["runs"]:
        models = MODELS if run["models"] == "all" else tuple(run["models"])
        for model in models:
            for seed in range(seeds or run["seeds"]):
                rounds = INDICATION_ROUNDS if model == "gir-indication" else None
                cfg = GIRConfig(run["task"], run["transductive"], model, seed, epochs=settings["epochs"],
                                gir_rounds=rounds)
                cost = 3.0 if model.startswith(("pgnn", "gir-ind")) else 1.0
                jobs.append(Job(f"{_setting(run['task'], run['transductive'])}.{model}.s{seed}", run_gir, cfg, cost))
    return jobs


def summarize(results: dict[str, dict]) -> dict:
    """Mean ± std test AUC per (setting, model), convergence, and the three claims as paired per-seed
    differences (:func:`posenc.experiments.stats.paired_difference`, gated by :data:`GATE`),
    with Holm-adjusted verdicts over the section's comparisons."""
    groups: dict[str, dict[str, list[dict]]] = {}
    for res in results.values():
        groups.setdefault(_setting(res["task"], res["transductive"]), {}).setdefault(res["model"], []).append(res)
    table = {
        setting: {
            model: {
                **mean_std([r["test_auc"] for r in runs]),
                "val": statistics.fmean(r["val_auc"] for r in runs),
                "seconds": statistics.fmean(r["seconds"] for r in runs),
                "epochs": runs[0]["epochs"],
            }
            for model, runs in sorted(by_model.items())
        }
        for setting, by_model in sorted(groups.items())
    }
    comps: dict[str, list[dict]] = {"gir_ge_pgnn": [], "gir_far_above_gnn": [], "fusion_helps": []}
    for setting, by_model in sorted(groups.items()):
        runs = {m: {r["seed"]: r for r in rs} for m, rs in by_model.items()}

        def compare(method: str, baseline: str, shift: float, claim: str, what: str) -> None:
            # paired per seed: method - (baseline + shift) > 0, over the seeds whose two runs converged
            if method not in runs or baseline not in runs:
                return
            d = paired_difference({s: r["test_auc"] for s, r in runs[method].items()},
                                  {s: r["test_auc"] + shift for s, r in runs[baseline].items()},
                                  method_state={s: run_state(r) for s, r in runs[method].items()},
                                  baseline_state={s: run_state(r) for s, r in runs[baseline].items()})
            d.update({"task": setting, "method": method, "baseline": baseline, "metric": what})
            comps[claim].append(d)

        for pg in ("pgnn-e", "pgnn-f"):
            compare("gir", pg, -TIE_TOL, "gir_ge_pgnn", f"test AUC, {pg} − {TIE_TOL}")
        for kind in GNN_KINDS:
            compare("gir", kind, 0.1, "gir_far_above_gnn", f"test AUC, {kind} + 0.1")
            compare(f"{kind}+gir", kind, 0.0, "fusion_helps", "test AUC")
    # multiplicity: every comparison of the section is one family (Holm, next to each verdict)
    holm_verdicts({f"{k}/{i}": c for k, cs in comps.items() for i, c in enumerate(cs)})
    claims: dict[str, dict] = {}
    for name, cs in comps.items():
        if not cs:
            continue
        vs = [c["verdict"] for c in cs]
        counts = {v: vs.count(v) for v in (HOLDS, NOT_CONFIRMED, CONTRADICTED, NOT_DECIDED)}
        headline = vs[0] if len(cs) == 1 else (
            f"holds in {counts[HOLDS]} of {len(cs)} comparisons ({counts[NOT_CONFIRMED]} not confirmed, "
            f"{counts[CONTRADICTED]} contradicted, {counts[NOT_DECIDED]} not decided)")
        claims[name] = {"verdict": headline, "holds": counts[HOLDS] == len(cs), "comparisons": cs, "counts": counts}
    states = {f"{_setting(r['task'], r['transductive'])}.{r['model']}.s{r['seed']}": run_state(r)
              for r in results.values()}
    not_converged = sorted(k for k, st in states.items() if st == LEARNING)
    failed = sorted(k for k, st in states.items() if st == FAILED)
    curves = {
        key: res["curve"]
        for key, res in sorted(results.items())
        if res["seed"] == 0 and res["model"] in ("gcn", "pgnn-e", "gir")
    }
    return {"table": table, "claims": claims, "curves": curves, "not_converged": not_converged,
            "failed_to_learn": failed, "gate": {"all settings": GATE.as_dict()}}


# ------------------------------------------------------------------ result schemas
# the types the summary reads from each job's stored result (posenc.report.schema's spec language)
NUM = (float, None)  # a number, or null (a non-finite value is stored as null)
run_gir.result_schema = {  # type: ignore[attr-defined]
    "task": str, "transductive": bool, "model": str, "seed": int, "val_auc": NUM, "test_auc": NUM,
    "best_epoch": int, "final_loss": NUM, "epochs": int, "num_parameters": int, "curve": [[NUM]],
}
