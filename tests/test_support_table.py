"""``docs/api/support.md`` (torch.compile / torch.export / TorchScript per public module) is true today.

Every row is re-probed (``tools/support.py``; ~20 s of CPU for all of them, the rows spread
over the xdist workers) and its yes/no verdicts must read as committed (the reasons are
informational: TorchScript's can depend on what was scripted before, except for the graph
modules, which are scripted in a fresh process each and whose reasons are compared too); every public
``nn.Module`` has a row or a stated reason. The rows depend on the torch version, so they are compared only under the
version the page was probed with. Regenerate with ``make support``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import support  # noqa: E402

PAGE = support.TABLE.read_text(encoding="utf-8")
CASES = support.cases()
SAME_TORCH = support.probed_torch_version(PAGE) == torch.__version__.split("+")[0]


def test_every_public_module_has_a_row_or_a_reason():
    public = support.public_modules()
    probed = {case.cls.__name__ for case in CASES}
    missing = sorted(set(public) - probed - set(support.NOT_PROBED))
    assert not missing, f"public nn.Modules without a row in tools/support.py: {missing}"
    assert not set(support.NOT_PROBED) - set(public), "NOT_PROBED names a class that is not public"
    for case in CASES:
        assert f"| `{case.label}`" in PAGE, f"{case.label} has no row in docs/api/support.md (run make support)"
    assert len(CASES) >= len(public) - len(support.NOT_PROBED)


def test_the_probe_reports_failures_with_their_reason():
    from torch import nn

    class Breaks(nn.Module):
        def forward(self, x):
            if float(x.sum()) > 0:  # a data-dependent branch: a graph break, no export
                return x + 1
            return x - 1

    case = support.Case("Breaks", Breaks, lambda: (Breaks(), (torch.ones(3),)))
    res = support.probe_case(case)
    assert res["compile"].startswith("no (") and res["export"].startswith("no (")
    assert res["jit.script"] == "yes"  # TorchScript compiles Python control flow
    row = support.render_row(case)
    assert row.startswith("| `Breaks` | no: `") and row.endswith("| yes |")
    assert support.page_verdicts(row) == {"Breaks": ("no", "no", "yes")}
    ok = support.Case("Linear", nn.Linear, lambda: (nn.Linear(2, 2), (torch.ones(1, 2),)))
    assert support.probe_case(ok) == {"compile": "yes", "export": "yes", "jit.script": "yes"}


@pytest.mark.skipif(not SAME_TORCH, reason=f"docs/api/support.md was probed with torch "
                    f"{support.probed_torch_version(PAGE)}, this is {torch.__version__}")
@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_row_is_what_the_probe_finds(case):
    support.probe_case(case)
    committed = support.page_verdicts(PAGE)[case.label]
    assert support.verdicts(case) == committed, (
        f"docs/api/support.md is stale for {case.label} (run make support): committed "
        f"{dict(zip(support.CHECKS, committed))}, probed now {case.results}")


@pytest.mark.skipif(not SAME_TORCH, reason=f"docs/api/support.md was probed with torch "
                    f"{support.probed_torch_version(PAGE)}, this is {torch.__version__}")
def test_graph_torchscript_reasons_do_not_depend_on_probe_order():
    # scripted after GIR and StandardGNN in one process, FusedGIR failed with another error
    # ("TypeError: _create_methods_and_properties() ...") than alone ("RuntimeError: propagate(...")
    import json
    import subprocess

    by_label = {case.label: case for case in support.cases()}
    for label in ("GIR", 'StandardGNN("gcn")'):
        support.probe_case(by_label[label])
    after = support.probe_case(by_label["FusedGIR"])["jit.script"]
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from tools import support; "
            "case = {c.label: c for c in support.cases()}['FusedGIR']; "
            "print(json.dumps(support.probe_case(case)['jit.script']))")
    res = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=600,
                         check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    alone = json.loads(res.stdout.strip().splitlines()[-1])
    assert after == alone
    assert all(by_label[label].fresh for label in ("GIR", 'StandardGNN("gcn")', "FusedGIR", "PGNN", "PGNNLayer"))
    # the committed page holds that reason
    row = next(line for line in PAGE.splitlines() if line.startswith("| `FusedGIR`"))
    assert row.endswith(f"| {support._cell(alone)} |"), row


@pytest.mark.skipif(not SAME_TORCH, reason=f"docs/api/support.md was probed with torch "
                    f"{support.probed_torch_version(PAGE)}, this is {torch.__version__}")
@pytest.mark.parametrize("case", [c for c in CASES if getattr(c, "fresh", False)],
                         ids=[c.label for c in CASES if getattr(c, "fresh", False)])
def test_the_reasons_of_cases_scripted_in_a_fresh_process_read_as_committed(case):
    support.probe_case(case)
    row = next(line for line in PAGE.splitlines() if line.startswith(f"| `{case.label}`"))
    assert row.endswith(f"| {support._cell(case.results['jit.script'])} |"), (row, case.results)


def test_a_fresh_process_refuses_an_unknown_case_label():
    import subprocess

    res = subprocess.run([sys.executable, "-m", "tools.support", "--script-case", "NoSuchModule"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 2 and "error: --script-case 'NoSuchModule'" in res.stderr
