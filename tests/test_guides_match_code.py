"""The guides quote the reproduction sections' settings as the code has them.

Each guide states its section's testbed, profiles, convergence gate and smallest differences
that matter in a few sentences; each test below finds one of those sentences (a targeted regex,
line breaks read as spaces, the collapsed history sections left out) and compares every number
in it with the value the code uses: the section's config dataclass, its ``Gate`` objects, its
claim constants, or ``profiles.toml`` through the section's ``plan``/``profile_settings``. A
change on either side fails here until the other side follows.

The history sections (``<details><summary>History: results of earlier code</summary>``) hold
numbers of earlier code; every block in them names the commit that produced it.
"""

from __future__ import annotations

import inspect
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from posenc.experiments import cape, gir, krpe, lff, relative, search
from posenc.experiments.profiles import profile_settings

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ("cape", "lff", "krpe", "graph", "relative", "search")
HISTORY = re.compile(r"<details><summary>History: results of earlier code</summary>(.*?)</details>", re.DOTALL)
MARKER = "<!-- current results"


def text(guide: str) -> str:
    return (ROOT / "docs" / f"{guide}.md").read_text(encoding="utf-8")


def current(guide: str) -> str:
    """The guide without its history sections, whitespace runs read as one space."""
    return re.sub(r"\s+", " ", HISTORY.sub("", text(guide)))


def find(guide: str, pattern: str) -> re.Match:
    m = re.search(pattern, current(guide))
    assert m, f"docs/{guide}.md no longer states (regex) {pattern!r}: restate it or update this test"
    return m


def num(s: str) -> float:
    return float(s.replace(",", ""))


def ints(s: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", s)]


def chance(s: str) -> float:
    """A chance level as the guides write it: ``0.1``, ``1/8``, ``ln 2``."""
    s = s.strip()
    if s.startswith("ln "):
        return math.log(num(s[3:]))
    if "/" in s:
        a, b = s.split("/")
        return num(a) / num(b)
    return num(s)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def configs(jobs, prefix: str) -> list:
    return [j.config for j in jobs if j.key.startswith(prefix)]


# ------------------------------------------------------------------------------------ every guide
@pytest.mark.parametrize("guide", GUIDES)
def test_guide_has_one_current_results_marker_and_links_the_gate_rule(guide):
    body = text(guide)
    assert body.count(MARKER) == 1, f"docs/{guide}.md: the current-results marker must appear once"
    assert "index.md#how-a-reproduction-reads-a-claim" in current(guide)
    assert "## How a reproduction reads a claim" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")


def _git_has_full_history() -> bool:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return False
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                         capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.strip() == "false"


@pytest.mark.parametrize("guide", GUIDES)
def test_history_blocks_name_the_commit_that_produced_them(guide):
    blocks = HISTORY.findall(text(guide))
    assert blocks, f"docs/{guide}.md has no history section"
    shas = []
    for block in blocks:
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", block) if p.strip()]
        assert paragraphs and paragraphs[0].startswith("Produced by commit"), \
            f"docs/{guide}.md: a history section must open with its provenance line"
        for p in paragraphs:
            if p.startswith("Produced by"):
                assert re.match(r"Produced by commits? `[0-9a-f]{12}`", p) and re.search(r"\(\d{4}-\d{2}-\d{2}", p), p
                shas += re.findall(r"`([0-9a-f]{12})`", p)
    if not _git_has_full_history():
        pytest.skip("no full git history here to look the commits up")
    for sha in shas:
        out = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{sha}^{{commit}}"], capture_output=True)
        assert out.returncode == 0, f"docs/{guide}.md names commit {sha}, which this repository does not have"


# ------------------------------------------------------------------------------------------- cape
def test_cape_testbed():
    cfg = cape.ResolutionConfig()
    grid = cfg.train_res // cfg.patch
    m = find("cape", r"a `TinyViT` with (\d+)×\1-pixel patches, a CLS token, width (\d+), (\d+) pre-LN layers "
                     r"and (\d+) heads, trained on batches of (\d+)\.")
    assert [int(x) for x in m.groups()] == [cfg.patch, cfg.dim, cfg.depth, cfg.heads, cfg.batch]
    assert int(find("cape", r"rendered at (\d+)×\1 px for training").group(1)) == cfg.train_res
    m = find("cape", r"every resolution from (\d+) px to (\d+) px")
    assert (int(m.group(1)), int(m.group(2))) == (min(cfg.test_res), max(cfg.test_res))
    m = find("cape", r"an (\d+)×\1 grid of patches at (\d+) px, (\d+)×\3 at (\d+) px, (\d+)×\5 at (\d+) px")
    g0, r0, g1, r1, g2, r2 = (int(m.group(i)) for i in range(1, 7))
    assert r0 == cfg.train_res and {r1, r2} <= set(cfg.test_res)
    assert (g0, g1, g2) == (r0 // cfg.patch, r1 // cfg.patch, r2 // cfg.patch)
    # "at 16 px one patch covers one pixel of the original 8x8 digit ... a bag of 64 intensities"
    m = find("cape", r"at (\d+) px one patch covers one pixel of the original 8×8 digit, so without positions "
                     r"the model sees a bag of (\d+) intensities")
    assert int(m.group(1)) == cfg.train_res and grid == 8 and int(m.group(2)) == grid * grid
    assert int(find("cape", r"`table`: a learned (\d+)×\1 table").group(1)) == grid
    m = find("cape", r"drawn per step from \{(\d+), (\d+), (\d+)\} px")
    assert tuple(int(m.group(i)) for i in (1, 2, 3)) == cfg.mixed_res
    m = find("cape", r"The rule picks, from \{([^}]*)\}, the rate")
    assert tuple(float(x) for x in m.group(1).split(",")) == cape.LR_GRID


def test_cape_profiles():
    quick, full = profile_settings("cape", "quick"), profile_settings("cape", "full")
    m = find("cape", r"the quick profile trains `(\w+)` and `(\w+)` on (\d+) seeds for ([\d,]+) steps, evaluated "
                     r"every (\d+) steps\. The full profile trains all (\w+) variants on (\d+) seeds for ([\d,]+) "
                     r"steps, evaluated every (\d+) steps, after the learning-rate sweep on (\d+) seed")
    assert [m.group(1), m.group(2)] == quick["variants"]
    assert (int(m.group(3)), num(m.group(4)), int(m.group(5))) == (quick["seeds"], quick["steps"], quick["eval_every"])
    assert m.group(6) == "six" and full["variants"] == list(cape.VARIANTS) and len(cape.VARIANTS) == 6
    assert (int(m.group(7)), num(m.group(8)), int(m.group(9)), int(m.group(10))) == (
        full["seeds"], full["steps"], full["eval_every"], full["sweep_seeds"])
    assert quick["sweep_seeds"] == 0
    steps = num(find("cape", r"CAPE trains to its plateau in about the full profile's ([\d,]+) steps").group(1))
    assert steps == full["steps"] == cape.ResolutionConfig().steps
    # the quick profile reads one claim: the task needs position (sine against none)
    find("cape", r"It trains only `none` and `sine`, so it reads one claim: the task needs position")
    method, baseline, *_ = cape.CLAIMS["task_needs_position"]
    assert {method, baseline} == set(quick["variants"])


def test_cape_gate_and_claims():
    m = find("cape", r"A run has converged when the least-squares line through the evaluations of the last third "
                     r"of training gains at most (\d+(?:\.\d+)?); it failed to learn when those evaluations average within "
                     r"(\d+(?:\.\d+)?) of chance \((\d+(?:\.\d+)?): ten classes\)")
    gate = cape.GATE
    assert close(gate.tail, 1 / 3) and not gate.running_best and gate.higher_is_better
    assert (num(m.group(1)), num(m.group(2))) == (gate.tol, gate.learned)
    assert close(num(m.group(3)), gate.chance) and close(gate.chance, 1 / cape.NUM_CLASSES)
    sesoi = num(find("cape", r"The directional claims state a smallest difference that matters of (\d+(?:\.\d+)?)").group(1))
    assert sesoi == cape.SESOI
    directional = [c for c in cape.CLAIMS.values() if c[3] != "equal"]
    assert directional and all(c[5] == cape.SESOI for c in directional)
    margin = num(find("cape", r"equivalence claim with a margin of ±(\d+(?:\.\d+)?)").group(1))
    assert margin == cape.CLAIMS["cape_matches_sine_at_train_res"][4]


# -------------------------------------------------------------------------------------------- lff
def test_lff_testbeds():
    d, g = lff.DigitsConfig(), lff.GridConfig()
    m = find("lff", r"`TinyViT` \(width (\d+), (\d+) blocks, (\d+) heads of (\d+) channels, CLS token\) on "
                    r"scikit-learn's bundled digits upsampled to (\d+)×\5, (\d+)×\6 patches; (\d+) steps of batch "
                    r"(\d+), evaluated every (\d+) steps")
    assert [int(x) for x in m.groups()] == [d.dim, d.depth, d.heads, d.dim // d.heads, 8 * d.upsample,
                                           8 * d.upsample // d.patch, d.steps, d.batch, d.eval_every]
    m = find("lff", r"within an L2 radius (\d+(?:\.\d+)?) cells of the marker\" on a (\d+)×\2 grid")
    assert (num(m.group(1)), int(m.group(2))) == (g.radius, g.grid)
    m = find("lff", r"([\d,]+) steps of batch (\d+) \(evaluated every (\d+) steps\), fresh samples every step; "
                    r"validation and test sets are two further draws of (\d+) samples")
    assert (num(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4))) == (
        g.steps, g.batch, g.eval_every, g.eval_samples)
    m = find("lff", r"finer grids over the same extent\*\* \((\d+)×\1, (\d+)×\2, radius scaled")
    assert (int(m.group(1)), int(m.group(2))) == g.test_grids


def test_lff_gate_and_smallest_differences():
    m = find("lff", r"improves by at most the task's tolerance: (\d+(?:\.\d+)?) of validation accuracy on the digits, "
                    r"(\d+(?:\.\d+)?) of validation BCE on the grid\. .*? It \*failed to learn\* when those evaluations "
                    r"average within (\d+(?:\.\d+)?) of chance: (\d+(?:\.\d+)?) on the digits \(ten classes\), (ln \d+) on the grid")
    digits, grid = lff.GATES["digits"], lff.GATES["grid"]
    assert (num(m.group(1)), num(m.group(2))) == (digits.tol, grid.tol)
    assert num(m.group(3)) == digits.learned == grid.learned
    assert close(chance(m.group(4)), digits.chance) and close(chance(m.group(5)), grid.chance)
    assert digits.higher_is_better and not grid.higher_is_better
    assert all(close(gt.tail, 1 / 3) and not gt.running_best for gt in lff.GATES.values())
    m = find("lff", r"The smallest differences that matter, fixed with the claims: (\d+(?:\.\d+)?) of accuracy \(the digits' "
                    r"final test accuracy, the grid's balanced accuracy at the finer resolutions\) and (\d+(?:\.\d+)?) nats of "
                    r"mean training loss; the anisotropy claim has none")
    assert num(m.group(1)) == lff.SESOI["final_acc"] == lff.SESOI["finer_bacc"]
    assert num(m.group(2)) == lff.SESOI["auc_loss"] and lff.SESOI["anisotropy"] is None
    assert set(lff.SESOI) == {key for key, _, _ in lff.CLAIMS.values()}


def test_lff_profiles_and_sweep():
    quick, full = profile_settings("lff", "quick"), profile_settings("lff", "full")
    assert int(find("lff", r"--profile quick --out \S+ --workers 2 # digits, (\d+) seeds").group(1)) == quick["seeds"]
    assert int(find("lff", r"--profile full --out \S+ --threads 1 # sweep \+ both tasks, (\d+) seeds").group(1)) == \
        full["seeds"]
    m = find("lff", r"\*quick\* \(`make demo`\): the digits task only, the (\d+) compared encodings, (\d+) seeds of "
                    r"(\d+) steps at the frozen learning rate \((\d+) runs; .*? runs of seeds 0–(\d+)\)")
    q_jobs = lff.plan("quick")
    assert quick["tasks"] == ["digits"] and not quick["sweep"] and quick["encodings"] == "compared"
    assert int(m.group(1)) == len(lff.COMPARED)
    assert (int(m.group(2)), int(m.group(3))) == (quick["seeds"], quick["steps"]["digits"])
    assert int(m.group(4)) == len(q_jobs) and int(m.group(5)) == quick["seeds"] - 1
    assert quick["steps"]["digits"] == full["steps"]["digits"]  # "the full profile's digits settings"
    m = find("lff", r"\*full\*: the sweep of both tasks \((\d+) runs\), then both tasks with all (\d+) encodings "
                    r"\(with the `none` reference\) on (\d+) seeds \((\d+) runs\): the digits for ([\d,]+) steps, "
                    r"the grid for ([\d,]+)\.")
    f_jobs = lff.plan("full")
    sweep = [j for j in f_jobs if j.key.startswith("sweep.")]
    assert full["sweep"] and full["encodings"] == "all" and full["tasks"] == list(lff.TASKS)
    assert int(m.group(1)) == len(sweep) and int(m.group(2)) == len(lff.ENCODINGS)
    assert (int(m.group(3)), int(m.group(4))) == (full["seeds"], len(f_jobs) - len(sweep))
    assert (num(m.group(5)), num(m.group(6))) == (full["steps"]["digits"], full["steps"]["grid"])
    m = find("lff", r"`LR_SWEEP` = ([^ ]+), ([^ ]+), ([^ ]+) with the seeds `SWEEP_SEEDS` = (\d+), (\d+), (\d+) "
                    r"\(disjoint from the claims' seeds 0–(\d+)\)")
    assert tuple(float(m.group(i)) for i in (1, 2, 3)) == lff.LR_SWEEP
    assert tuple(int(m.group(i)) for i in (4, 5, 6)) == lff.SWEEP_SEEDS
    assert int(m.group(7)) == full["seeds"] - 1 < min(lff.SWEEP_SEEDS)


# ------------------------------------------------------------------------------------------- krpe
def _krpe_train_configs(profile: str) -> dict[str, list]:
    jobs = krpe.plan(profile, None)
    return {task: configs(jobs, f"train-{task}-") for task in ("copy", "recall")}


def test_krpe_budgets():
    for profile in ("quick", "full"):
        p = profile_settings("krpe", profile)
        m = find("krpe", rf"\| {profile} \| ([\d,]+) steps, (\d+) seeds \| ([\d,]+) steps, (\d+) seeds \|")
        assert (num(m.group(1)), int(m.group(2))) == (p["copy"]["steps"], p["copy"]["seeds"]), profile
        assert (num(m.group(3)), int(m.group(4))) == (p["recall"]["steps"], p["recall"]["seeds"]), profile
        cfgs = _krpe_train_configs(profile)
        for task in ("copy", "recall"):
            assert {c.steps for c in cfgs[task]} == {p[task]["steps"]}
            assert len({c.seed for c in cfgs[task]}) == p[task]["seeds"]
        m = find("krpe", r"\(copy: on (\d+) batches; recall: on (\d+) batches, ([\d,]+) queries\)")
        assert int(m.group(1)) == p["copy"]["val_batches"] and int(m.group(2)) == p["recall"]["val_batches"]
        assert num(m.group(3)) == p["recall"]["val_batches"] * cfgs["recall"][0].batch  # one query per sequence
    m = find("krpe", r"over (\d+) feature draws in the quick profile and (\d+) in the full one")
    draws = [configs(krpe.plan(p, None), "approx")[0].draws for p in ("quick", "full")]
    assert [int(m.group(1)), int(m.group(2))] == draws


def test_krpe_tasks_gate_and_claims():
    cfgs = _krpe_train_configs("quick")
    copy, recall = cfgs["copy"][0], cfgs["recall"][0]
    m = find("krpe", r"\*copy\* the token at i − (\d+) over (\d+) tokens of a vocabulary of (\d+), and \*associative "
                     r"recall\* with (\d+) key-value pairs over (\d+) keys and (\d+) values")
    assert [int(x) for x in m.groups()] == [copy.shift, copy.length, copy.vocab, recall.pairs, recall.vocab, recall.vocab]
    assert int(find("krpe", r"`KernelizedAttentionLayer` \(m = (\d+)\) as its attention").group(1)) == copy.features
    m = find("krpe", r"\((\d+) pre-LN layers, width (\d+), (\d+) heads, one-hot tokens.*?Adam ([\d.e-]+), batch (\d+)\.")
    assert (int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4)), int(m.group(5))) == (
        copy.layers, copy.embed_dim, copy.heads, copy.lr, copy.batch)
    m = find("krpe", r"gains at most (\d+(?:\.\d+)?) of accuracy on copy and (\d+(?:\.\d+)?) on recall .*? failed to learn when "
                     r"those evaluations average within (\d+(?:\.\d+)?) of chance, (1/\d+) on copy \(1/vocab: .*?\) and "
                     r"(1/\d+) on recall \(1/pairs:")
    assert (num(m.group(1)), num(m.group(2))) == (krpe.GATE_TOL["copy"], krpe.GATE_TOL["recall"])
    assert num(m.group(3)) == krpe.GATE_LEARNED
    for task, cfg, quoted in (("copy", copy, m.group(4)), ("recall", recall, m.group(5))):
        gate = krpe.gate(task, krpe.chance_level(cfg))
        assert close(chance(quoted), gate.chance), task
        assert close(gate.tail, 1 / 3) and not gate.running_best
    m = find("krpe", r"\(`norm_rpe` − `norm_nope` > (\d+(?:\.\d+)?)\), .*?\(`norm_rpe` − `performer_raw` > (\d+(?:\.\d+)?)\), .*?"
                     r"\(`norm_rpe` − `softmax_rpe` > −(\d+(?:\.\d+)?)\)")
    assert num(m.group(1)) == num(m.group(2)) == krpe.MARGIN
    assert close(num(m.group(3)), 2.5 * krpe.MARGIN)


# --------------------------------------------------------------------------------------- relative
def test_relative_gate_and_claims():
    m = find("relative", r"accuracy at the training length on (\d+) validation sequences every tenth of training")
    assert int(m.group(1)) == relative.LengthConfig.val_batch and relative.LengthConfig.evals == 10
    m = find("relative", r"A run has converged when the least-squares line through the evaluations of the last third "
                         r"of training gains at most (\d+(?:\.\d+)?)\. It failed to learn when those evaluations average "
                         r"within (\d+(?:\.\d+)?) of the task's chance level: (\d+/\d+) on `shift` and `first` \(any of the "
                         r"(\d+) tokens can be the answer\) and (\d+/\d+) on `recent`")
    gates = relative.GATES
    assert all(num(m.group(1)) == gt.tol and num(m.group(2)) == gt.learned for gt in gates.values())
    assert all(close(gt.tail, 1 / 3) and not gt.running_best for gt in gates.values())
    assert close(chance(m.group(3)), gates["shift"].chance) and close(chance(m.group(3)), gates["first"].chance)
    assert close(chance(m.group(5)), gates["recent"].chance)
    assert int(m.group(4)) == relative.LengthConfig.vocab == int(m.group(3).split("/")[1])
    sesoi = find("relative", r"A directional claim states a smallest difference that matters of (\d+(?:\.\d+)?) of accuracy")
    assert num(sesoi.group(1)) == relative.SESOI
    assert inspect.signature(relative._compare).parameters["sesoi"].default == relative.SESOI
    margin = num(find("relative", r"is an equivalence claim with a margin of ±(\d+(?:\.\d+)?)").group(1))
    # the equivalence margin is written into summarize's call for the CAPE claim
    code = re.search(r'"cape", "sinusoidal", "train", direction="equal", margin=(\d+(?:\.\d+)?)',
                     inspect.getsource(relative.summarize))
    assert code and num(code.group(1)) == margin


def test_relative_profiles():
    quick, full = profile_settings("relative", "quick"), profile_settings("relative", "full")
    m = find("relative", r"on sequences of (\d+) tokens and tests it at 1×–(\d+)× that length \((\d+)× in the full "
                         r"profile\)")
    assert int(m.group(1)) == relative.LengthConfig.train_length
    assert (int(m.group(2)), int(m.group(3))) == (max(quick["test_factors"]), max(full["test_factors"]))
    m = find("relative", r"The quick profile \(`make demo`\) tests at ([\d×, and]+)\. On `shift` it trains (\d+) "
                         r"variants \([^)]*\) on (\d+) seeds of (\d+) steps; on `recent` ([^;]*?) on (\d+) seeds of "
                         r"(\d+) steps; on `first` the same three on (\d+) seeds of (\d+) steps")
    assert ints(m.group(1)) == quick["test_factors"]
    runs = {r["task"]: r for r in quick["runs"]}
    assert (int(m.group(2)), int(m.group(3)), int(m.group(4))) == (
        len(runs["shift"]["variants"]), runs["shift"]["seeds"], runs["shift"]["steps"])
    assert (int(m.group(6)), int(m.group(7))) == (runs["recent"]["seeds"], runs["recent"]["steps"])
    assert (int(m.group(8)), int(m.group(9))) == (runs["first"]["seeds"], runs["first"]["steps"])
    assert runs["recent"]["variants"] == runs["first"]["variants"] == ["sinusoidal", "rope", "alibi"]
    m = find("relative", r"The full profile trains every variant on every task, (\d+) seeds of ([\d,]+) steps, and "
                         r"tests up to (\d+)×")
    assert {r["task"] for r in full["runs"]} == set(relative.TASKS)
    for r in full["runs"]:
        assert r["variants"] == "all" and (int(m.group(1)), num(m.group(2))) == (r["seeds"], r["steps"])
    assert int(m.group(3)) == max(full["test_factors"])


# -------------------------------------------------------------------------------------------- gir
def test_gir_gate_and_claims():
    m = find("graph", r"the gate reads the best-so-far validation AUC \(evaluated every (\d+) epochs\): a run has "
                      r"converged when its best validation AUC rose by at most (\d+(?:\.\d+)?) during the last third of "
                      r"training")
    gate = gir.GATE
    assert int(m.group(1)) == gir.GIRConfig("grid-link", False, "gir", 0).eval_every
    assert num(m.group(2)) == gate.tol and gate.running_best and close(gate.tail, 1 / 3)
    m = find("graph", r"best validation\s+AUC stays within (\d+(?:\.\d+)?) of chance \((\d+(?:\.\d+)?), a random scorer's AUC")
    assert (num(m.group(1)), num(m.group(2))) == (gate.learned, gate.chance)
    m = find("graph", r"GIR − P-GNN-E or P-GNN-F > −(\d+(?:\.\d+)?) AUC\), GIR is far above the standard GNNs "
                      r"\(GIR − GNN > (\d+(?:\.\d+)?)\) and fusion helps \(GNN \+ GIR − GNN > (\d+)\)")
    assert num(m.group(1)) == gir.TIE_TOL
    source = inspect.getsource(gir.summarize)
    far = re.search(r'compare\("gir", kind, (\d+(?:\.\d+)?), "gir_far_above_gnn"', source)
    fusion = re.search(r'compare\(f"\{kind\}\+gir", kind, (\d+(?:\.\d+)?), "fusion_helps"', source)
    assert far and num(far.group(1)) == num(m.group(2))
    assert fusion and num(fusion.group(1)) == num(m.group(3))


def test_gir_profiles():
    quick, full = profile_settings("gir", "quick"), profile_settings("gir", "full")
    m = find("graph", r"\*\*quick\*\* \(`make demo`\): \*\*(\d+) epochs only\*\* \(the paper trains (\d+)\)")
    assert (int(m.group(1)), int(m.group(2))) == (quick["epochs"], full["epochs"])
    m = find("graph", r"Grid-I link and Communities pairwise with ([^;]*?) on (\d+) seeds, and Grid-T link \(one-hot "
                      r"features\) with ([^;]*?) on (\d+) seeds")
    runs = {(r["task"], r["transductive"]): r for r in quick["runs"]}
    assert set(runs) == {("grid-link", False), ("communities-pair", False), ("grid-link", True)}
    names = {"GCN": "gcn", "SAGE": "sage", "P-GNN-E": "pgnn-e", "GIR": "gir", "GIR-distance": "gir-distance",
             "GCN+GIR": "gcn+gir"}
    inductive = [names[n.strip()] for n in m.group(1).split("/")]
    assert runs[("grid-link", False)]["models"] == runs[("communities-pair", False)]["models"] == inductive
    assert runs[("grid-link", False)]["seeds"] == runs[("communities-pair", False)]["seeds"] == int(m.group(2))
    assert runs[("grid-link", True)]["models"] == [names[n.strip()] for n in m.group(3).split("/")]
    assert runs[("grid-link", True)]["seeds"] == int(m.group(4))
    m = find("graph", r"\*\*full\*\*: (\d+) epochs \(the paper's protocol\), (\d+) seeds; all (\d+) models on Grid-I "
                      r"link prediction, and GCN / P-GNN-E / GIR on Communities-I link prediction, Communities "
                      r"pairwise classification and the transductive Grid-T and Communities-T link prediction")
    assert int(m.group(1)) == full["epochs"] and int(m.group(3)) == len(gir.MODELS)
    assert {r["seeds"] for r in full["runs"]} == {int(m.group(2))}
    settings = {(r["task"], r["transductive"]): r["models"] for r in full["runs"]}
    assert settings.pop(("grid-link", False)) == "all"
    assert set(settings) == {("communities-link", False), ("communities-pair", False), ("grid-link", True),
                             ("communities-link", True)}
    assert all(models == ["gcn", "pgnn-e", "gir"] for models in settings.values())


# ----------------------------------------------------------------------------------------- search
def test_search_gate_and_claims():
    from posenc.experiments.search import summary

    m = find("search", r"fits its training data \(training accuracy ≥ (\d+(?:\.\d+)?)\) or when the least-squares line "
                       r"through the last third of its epochs falls by at most (\d+(?:\.\d+)?) nats; it failed to learn when "
                       r"that third averages within (\d+(?:\.\d+)?) nats of chance \((ln \d+): ten classes\)")
    gate = search.GATE
    assert num(m.group(1)) == summary.FIT_AT
    assert (num(m.group(2)), num(m.group(3))) == (gate.tol, gate.learned)
    assert close(chance(m.group(4)), gate.chance) and not gate.higher_is_better and close(gate.tail, 1 / 3)
    sesoi = find("search", r"The accuracy claims \(outcome and ground truth\) state a smallest difference that matters "
                           r"of (\d+(?:\.\d+)?) \(half a point")
    assert num(sesoi.group(1)) == search.ACC_SESOI == 0.005
    # "the space's mean ... over every architecture of the space, those that failed to learn included"
    find("search", r"over every architecture of the space, those that failed to learn included")
    line = next((s for s in inspect.getsource(summary.space_claims).splitlines() if "mean_of = " in s), "")
    assert "for g in gt.values()" in line and not re.search(r"usable|state|converged|FAILED", line), line


def test_search_profiles():
    quick = search.space_profiles("quick")
    full = search.space_profiles("full")
    m = find("search", r"\*quick\*: `nb201`, three stacked NAS-Bench-201 cells of (\d+) edges over \{skip, conv3x3\} "
                       r"\((\d+) architectures, .*?\), (\d+) channels; (\d+) supernet seeds with α trained .*?, (\d+) "
                       r"supernet epochs, magnitude read at epochs ([\d, ]+)\. The ground truth scores the picks: the "
                       r"(\d+) architectures trained alone on (\d+) seeds of (\d+) epochs")
    q = quick["nb201"]
    assert set(quick) == {"nb201"} and q.variants == ("darts",)
    gt = configs(search.plan("quick"), "gt.nb201.")
    archs = {a for c in gt for a in c.archs}
    edges = len(next(iter(archs)).split("|"))
    assert (int(m.group(1)), int(m.group(2)), int(m.group(7))) == (edges, len(archs), len(archs))
    assert int(m.group(3)) == q.supernet.channels
    assert (int(m.group(4)), int(m.group(5))) == (q.seeds, q.supernet.epochs)
    assert tuple(ints(m.group(6))) == q.supernet.checkpoints
    assert q.supernet.retrain.epochs == 0  # the ground truth, not the supernet job, scores the picks
    assert (int(m.group(8)), int(m.group(9))) == (q.gt_seeds, q.gt_retrain.epochs)
    m = find("search", r"\*full\*: `nb201` with both variants \(α trained and fixed\), (\d+) seeds, (\d+) epochs "
                       r"\(magnitude read at epochs ([\d, ]+)\), the ground truth on (\d+) seeds of (\d+) epochs; and "
                       r"S1–S4 on DARTS cells \(normal, reduction, reduction; (\d+) intermediate nodes, (\d+) "
                       r"channels\), (\d+) seeds of each variant, (\d+) epochs \(magnitude read at epochs ([\d, ]+)\), "
                       r"picks retrained (\d+) epochs")
    n = full["nb201"]
    assert n.variants == ("darts", "fixed") and n.supernet.retrain.epochs == 0
    assert (int(m.group(1)), int(m.group(2))) == (n.seeds, n.supernet.epochs)
    assert tuple(ints(m.group(3))) == n.supernet.checkpoints
    assert (int(m.group(4)), int(m.group(5))) == (n.gt_seeds, n.gt_retrain.epochs)
    darts = [full[s] for s in ("s1", "s2", "s3", "s4")]
    assert set(full) == {"nb201", "s1", "s2", "s3", "s4"}
    for d in darts:
        assert (d.supernet.num_nodes, d.supernet.channels) == (int(m.group(6)), int(m.group(7)))
        assert (d.seeds, d.supernet.epochs) == (int(m.group(8)), int(m.group(9)))
        assert tuple(ints(m.group(10))) == d.supernet.checkpoints
        assert d.supernet.retrain.epochs == int(m.group(11)) and d.gt_seeds == 0
        assert d.variants == ("darts", "fixed")
