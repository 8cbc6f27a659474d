"""Records name the code that made them, and job workers pin the floating-point paths.

The cause these tests guard against: torch's CPU kernels pick the widest vector instructions
the CPU has at their first call, so the same code and config rounded differently on machines
with and without AVX-512, and a training run turned the rounding into other results.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import toyjobs  # noqa: E402

from posenc.report import provenance, runner  # noqa: E402
from posenc.report.executors import LocalExecutor  # noqa: E402
from posenc.report.store import JobStore  # noqa: E402


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


#: three SGD steps (plain updates: torch.optim would import the compiler stack, ~1 s a process) of a
#: conv + BatchNorm + linear net; prints its parameters' bits and the capability
TRAIN = """
import torch
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
x, y = torch.randn(16, 8, 8, 8, generator=g), torch.randint(10, (16,), generator=g)
net = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                          torch.nn.Flatten(), torch.nn.Linear(512, 10))
for _ in range(3):
    loss = torch.nn.functional.cross_entropy(net(x), y)
    net.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in net.parameters():
            p -= 0.05 * p.grad
print(" ".join(float(p.detach().double().sum()).hex() for p in net.parameters()), torch.backends.cpu.get_cpu_capability())
"""


def _train_bits(env: dict[str, str]) -> str:
    inherited = {k: v for k, v in os.environ.items() if k not in provenance.NUMERICS_ENV}  # only what `env` pins
    out = subprocess.run([sys.executable, "-c", TRAIN], env={**inherited, **env}, capture_output=True, text=True,
                         check=True, timeout=120)
    return out.stdout.strip()


@pytest.mark.skipif("avx512f" not in _cpu_flags(), reason="needs a CPU with AVX-512 to show two vector widths")
def test_the_vector_width_changes_the_rounding_and_the_pin_fixes_it():
    wide = _train_bits({"ATEN_CPU_CAPABILITY": "avx512"})
    pinned = _train_bits(dict(provenance.NUMERICS_ENV))
    assert wide.endswith("AVX512") and pinned.endswith("AVX2")
    assert wide.split()[:-1] != pinned.split()[:-1]  # the same training, other bits: the cause
    assert _train_bits(dict(provenance.NUMERICS_ENV)) == pinned  # pinned: the same bits every time


@pytest.mark.skipif("avx2" not in _cpu_flags(), reason="needs a CPU with AVX2")
def test_local_workers_run_on_the_pinned_paths():
    ex = LocalExecutor(1, 1)
    try:
        label = ex.numerics()
    finally:
        ex.close()
    assert label == "cpu=AVX2 mkl=AVX2 onednn=AVX2"


def test_source_digest_follows_the_code_a_section_runs(tmp_path, monkeypatch):
    pkg = tmp_path / "posenc"
    shutil.copytree(provenance._PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "_PACKAGE", pkg)
    provenance.source_digest.cache_clear()

    def digests() -> dict[str, str]:
        provenance.source_digest.cache_clear()
        return {m: provenance.source_digest(m) for m in
                ("posenc.experiments.cape", "posenc.experiments.lff", "posenc.experiments.search.stacked")}

    before = digests()
    assert len(set(before.values())) == 3
    (pkg / "experiments" / "cape.py").write_text((pkg / "experiments" / "cape.py").read_text() + "\n# edit\n")
    after = digests()
    assert after["posenc.experiments.cape"] != before["posenc.experiments.cape"]
    assert {k: after[k] for k in after if "cape" not in k} == {k: before[k] for k in before if "cape" not in k}
    (pkg / "experiments" / "search" / "summary.py").write_text("# edit\n")
    assert digests()["posenc.experiments.search.stacked"] != after["posenc.experiments.search.stacked"]
    (pkg / "report" / "runner.py").write_text("# the report layer computes no result\n")
    (pkg / "cli.py").write_text("# nor does the command line\n")
    assert digests()["posenc.experiments.lff"] == after["posenc.experiments.lff"]
    (pkg / "encodings" / "cape.py").write_text((pkg / "encodings" / "cape.py").read_text() + "\n# library edit\n")
    assert all(a != b for a, b in zip(digests().values(), after.values()))  # the library: every section
    provenance.source_digest.cache_clear()


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(runner, "get_section", lambda name: toyjobs.section(n=3))
    monkeypatch.setattr(runner, "SECTIONS", {"toy": "x:y"})


def test_records_name_their_code_and_other_code_is_recomputed_with_one_warning(toy, tmp_path, monkeypatch):
    runner.reproduce(["toy"], out=tmp_path)
    store = JobStore(tmp_path)
    record = json.loads(store.path("toy", "j0").read_text())
    assert record["code"]["source"] == provenance.source_digest("toyjobs")
    assert record["code"]["torch"] and record["code"]["numerics"].startswith("cpu=")
    summary = json.loads((tmp_path / "toy.json").read_text())
    assert provenance.same_code(summary["code"], record["code"])
    notices: list[str] = []
    res = runner.reproduce(["toy"], out=tmp_path, notice=notices.append)
    assert res["jobs"]["toy"]["computed"] == [] and notices == []  # the same code: everything reused
    monkeypatch.setattr(provenance, "source_digest", lambda module=None: "feedfacefeedface")
    res = runner.reproduce(["toy"], out=tmp_path, notice=notices.append)
    assert res["jobs"]["toy"]["computed"] == ["j0", "j1", "j2"]
    assert sorted(res["jobs"]["toy"]["other_code"]) == ["j0", "j1", "j2"]
    assert len(notices) == 1 and "3 stored record(s)" in notices[0] and "made by other code" in notices[0]
    assert "feedface" in notices[0] and "fresh --out" in notices[0]
    assert json.loads(store.path("toy", "j1").read_text())["code"]["source"] == "feedfacefeedface"


def test_same_code_ignores_the_informational_fields():
    a = {"posenc": "1", "source": "s", "torch": "t", "numerics": "n", "commit": "c"}
    assert provenance.same_code(a, {**a, "commit": None, "posenc": "2"})
    assert not provenance.same_code(a, {**a, "numerics": "m"})
    assert not provenance.same_code(a, None)
    assert "no code version" in provenance.describe_code(None)
