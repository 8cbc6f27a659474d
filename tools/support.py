"""Which public posenc modules work under ``torch.compile``, ``torch.export`` and ``torch.jit.script``.

``python -m tools.support`` probes every ``nn.Module`` in posenc's public API (the
``__all__`` of :data:`PUBLIC_MODULES`; encodings once per registered name, and the
attention modules once per position variant) and writes ``docs/api/support.md``
(``--check`` compares instead of writing, and exits 1 when the committed table is stale).
``tests/test_support_table.py`` re-probes and checks that the committed table is what
the probe says today. Each case builds a small module in evaluation mode with example
inputs and tries three things:

* ``compile``: ``torch.compile(module, backend="eager", fullgraph=True)`` -- the
  ``eager`` backend traces with TorchDynamo like any backend (so a graph break fails
  ``fullgraph=True``) but skips code generation, which keeps the probe cheap; the
  output must equal eager mode's;
* ``export``: ``torch.export.export(module, args)``, then the exported program run on
  the same inputs must equal eager mode's;
* ``jit.script``: ``torch.jit.script(module)`` run on the same inputs (TorchScript is
  deprecated in favour of the two above; it is listed for users who still ship it).

A failure is recorded as ``no`` with the exception's type and first line. TorchScript keeps
state between scripts that a reset in the same process does not clear (torch_geometric's
message passing compiles its ``propagate`` once per process: scripted after ``GIR``, ``FusedGIR``
fails with another error than alone), so the cases marked ``fresh`` (the graph modules) are
scripted in a new Python process each (``python -m tools.support --script-case LABEL``), and
their reasons do not depend on what was probed before.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import inspect
import io
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "api" / "support.md"

#: The modules whose ``__all__`` is posenc's public API.
PUBLIC_MODULES = ("posenc", "posenc.encodings", "posenc.attention", "posenc.graph", "posenc.models",
                  "posenc.search", "posenc.interop", "posenc.positions", "posenc.analysis")

CHECKS = ("compile", "export", "jit.script")

#: Public nn.Module classes that are not probed, and why (shown under the table).
NOT_PROBED = {
    "Encoding": "abstract base class of every encoding (probed through each registered encoding)",
    "CoordinateEncoding": "abstract base class of the coordinate encodings (probed through each of them)",
    "Noise": "RobustDARTS's noise op draws fresh N(0, 1) on every call, so no traced output can equal an eager one",
}


@dataclass
class Case:
    """One probed configuration: ``build() -> (module, example args)``.

    Args:
        label: the row's name (unique among :func:`cases`).
        cls: the public class probed.
        build: ``() -> (module, args)`` or ``(module, args, kwargs)``.
        note: shown after the label.
        fresh: script it (``jit.script``) in a new Python process (see :func:`script_in_fresh_process`),
            for modules whose TorchScript result depends on what the process scripted before.
        results: ``{check: "yes" | "no (why)"}`` once probed.
    """

    label: str
    cls: type
    build: Callable[[], tuple]  # -> (module, args) or (module, args, kwargs)
    note: str = ""
    fresh: bool = False
    results: dict[str, str] = field(default_factory=dict)


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- the cases
def _encoding_cases() -> list[Case]:
    from posenc.encodings import available_encodings, create_encoding, encoding_class

    two_d = {"lff", "coord_mlp"}
    cases = []
    for name in available_encodings():
        def build(name=name):
            kw: dict[str, Any] = {"in_dim": 2} if name in two_d else {}
            if name == "learned_table":
                kw.update(grid_size=16)
            enc = create_encoding(name, **kw, num_features=16) if name != "basic" else create_encoding(name)
            if name == "learned_table":
                pos = torch.arange(8)[:, None]
            elif name in ("cape", "sinusoidal"):
                pos = torch.arange(8.0)[None, :, None]
            else:
                lo, hi = getattr(enc, "domain", (0.0, 1.0))
                pos = lo + (hi - lo) * torch.rand(8, enc.in_dim, generator=_g())
            return enc.eval(), (pos,)

        cases.append(Case(f'create_encoding("{name}")', encoding_class(name), build))
    return cases


def _attention_cases() -> list[Case]:
    import posenc.attention as A

    def qk(h=2, n=8, d=16):
        return torch.randn(1, h, n, d, generator=_g(1)), torch.randn(1, h, n, d, generator=_g(2))

    def rope():
        q, k = qk()
        return A.RotaryEmbedding(16), (q, k)

    def axial():
        q, k = qk(n=12)
        pos = torch.stack(torch.meshgrid(torch.arange(3.0), torch.arange(4.0), indexing="ij"), -1).reshape(12, 2)
        return A.AxialRotaryEmbedding(16, 2), (q, k, pos)

    def mixed():
        q, k = qk(n=12)
        pos = torch.stack(torch.meshgrid(torch.arange(3.0), torch.arange(4.0), indexing="ij"), -1).reshape(12, 2)
        return A.MixedRotaryEmbedding(16, 2), (q, k, pos)

    def bias():
        return A.RelativePositionBias(2), (8, 8)

    def features(cls):
        def build():
            return cls(8, 16), (torch.randn(1, 2, 8, 8, generator=_g()),)
        return build

    def kattn():
        q, k = qk(d=8)
        v = torch.randn(1, 2, 8, 8, generator=_g(3))
        return A.KernelizedAttention(2, 8, 8), (q, k, v)

    def kmha_old():
        return A.KernelizedMultiheadAttention(16, 2, num_features=8), (torch.randn(1, 8, 16, generator=_g()),)

    def self_attn(position):
        def build():
            return A.RelativeSelfAttention(16, 2, position=position), (torch.randn(1, 8, 16, generator=_g()),)
        return build

    def mha(position):
        def build():
            x = torch.randn(1, 8, 16, generator=_g())
            return (A.RelativeMHA(16, 2, batch_first=True, position=position).eval(), (x, x, x),
                    {"need_weights": False})
        return build

    def kmha():
        x = torch.randn(1, 8, 16, generator=_g())
        return A.KernelizedMHA(16, 2, batch_first=True, num_features=8).eval(), (x, x, x), {"need_weights": False}

    cases = [
        Case("RotaryEmbedding", A.RotaryEmbedding, rope),
        Case("AxialRotaryEmbedding", A.AxialRotaryEmbedding, axial),
        Case("MixedRotaryEmbedding", A.MixedRotaryEmbedding, mixed),
        Case("RelativePositionBias", A.RelativePositionBias, bias),
        Case("PositiveRandomFeatures", A.PositiveRandomFeatures, features(A.PositiveRandomFeatures)),
        Case("TrigRandomFeatures", A.TrigRandomFeatures, features(A.TrigRandomFeatures)),
        Case("KernelizedAttention", A.KernelizedAttention, kattn),
        Case("KernelizedMultiheadAttention", A.KernelizedMultiheadAttention, kmha_old),
        Case("KernelizedMHA", A.KernelizedMHA, kmha),
    ]
    for position in ("rope", "xpos", "alibi", "t5", "learned", "none"):
        cases.append(Case(f'RelativeSelfAttention(position="{position}")', A.RelativeSelfAttention,
                          self_attn(position)))
    for position in ("rope", "alibi", "t5", "none"):
        cases.append(Case(f'RelativeMHA(position="{position}")', A.RelativeMHA, mha(position)))
    return cases


def _graph_cases() -> list[Case]:
    import posenc.graph as G

    def graph():
        # a 4 x 4 grid: 16 nodes, 2 anchors
        ei = []
        for r in range(4):
            for c in range(4):
                u = 4 * r + c
                if c < 3:
                    ei += [(u, u + 1), (u + 1, u)]
                if r < 3:
                    ei += [(u, u + 4), (u + 4, u)]
        edge_index = torch.tensor(ei).t().contiguous()
        dist = G.anchor_distances(edge_index, 16, torch.tensor([0, 15]))
        return torch.randn(16, 3, generator=_g()), edge_index, dist

    def gir():
        x, ei, dist = graph()
        return G.GIR(3, 8).eval(), (x, ei, dist)

    def gnn():
        x, ei, _ = graph()
        return G.StandardGNN("gcn", 3, 8, 8).eval(), (x, ei)

    def fused():
        x, ei, dist = graph()
        return G.FusedGIR(G.StandardGNN("gcn", 3, 8, 8), G.GIR(3, 8)).eval(), (x, ei, dist)

    def pgnn_inputs():
        from posenc.graph._validate import adjacency_csr

        _, ei, _ = graph()
        return G.pgnn_anchor_inputs(adjacency_csr(ei, 16), G.bourgain_anchor_sets(16, generator=0), q=None)

    def pgnn():
        weight, index = pgnn_inputs()
        return G.PGNN(3, 8).eval(), (torch.randn(16, 3, generator=_g()), weight, index)

    def pgnn_layer():
        weight, index = pgnn_inputs()
        return G.PGNNLayer(3, 8).eval(), (torch.randn(16, 3, generator=_g()), weight, index)

    # scripted in a fresh process each: torch_geometric's TorchScript state outlives a reset
    return [Case("GIR", G.GIR, gir, fresh=True), Case('StandardGNN("gcn")', G.StandardGNN, gnn, fresh=True),
            Case("FusedGIR", G.FusedGIR, fused, fresh=True), Case("PGNN", G.PGNN, pgnn, fresh=True),
            Case("PGNNLayer", G.PGNNLayer, pgnn_layer, fresh=True)]


def _model_cases() -> list[Case]:
    import posenc.models as M
    from posenc import create_encoding

    def vit():
        enc = create_encoding("sinusoidal", in_dim=2, num_features=16)
        return M.TinyViT(1, 3, patch_size=4, dim=16, depth=1, num_heads=2, encoding=enc).eval(), (
            torch.randn(2, 1, 8, 8, generator=_g()),)

    def encoder():
        enc = create_encoding("sinusoidal", num_features=16)
        return M.TransformerEncoder(4, 3, dim=16, depth=1, num_heads=2, encoding=enc).eval(), (
            torch.randn(2, 8, 4, generator=_g()), torch.arange(8.0)[:, None])

    def attn():
        return M.SelfAttention(16, 2).eval(), (torch.randn(2, 8, 16, generator=_g()),)

    def block():
        return M.Block(16, 2, 2.0, M.SelfAttention).eval(), (torch.randn(2, 8, 16, generator=_g()),)

    return [Case("TinyViT", M.TinyViT, vit), Case("TransformerEncoder", M.TransformerEncoder, encoder),
            Case("SelfAttention", M.SelfAttention, attn), Case("Block", M.Block, block)]


def _node_encoding() -> tuple:
    import posenc.search as S

    enc = S.NodeEncoding("random_walk_pe", 16).eval()
    ring = torch.arange(12)
    enc.edge_index = torch.stack([torch.cat([ring, (ring + 1) % 12]), torch.cat([(ring + 1) % 12, ring])])
    return enc, (torch.randn(12, 16, generator=_g()),)


def _search_cases() -> list[Case]:
    import posenc.search as S
    from posenc import create_encoding

    def img(c=4, size=8, batch=2):
        return (torch.randn(batch, c, size, size, generator=_g()),)

    return [
        Case("MixedOp", S.MixedOp, lambda: (S.MixedOp({"a": nn.Identity(), "b": nn.Tanh()}), img())),
        Case("Zero", S.Zero, lambda: (S.Zero(), img())),
        Case("ReLUConvBN", S.ReLUConvBN, lambda: (S.ReLUConvBN(4, 3).eval(), img())),
        Case("SepConv", S.SepConv, lambda: (S.SepConv(4).eval(), img())),
        Case("NB201Cell", S.NB201Cell, lambda: (S.NB201Cell(4).eval(), img())),
        Case("NB201MicroNet", S.NB201MicroNet, lambda: (S.NB201MicroNet(4, 3).eval(), img(1))),
        Case("DartsCell", S.DartsCell,
             lambda: (S.DartsCell(4, 4, 4, [S.DARTS_OPS] * 5, num_nodes=2).eval(), img() + img())),
        Case("DartsNet", S.DartsNet,
             lambda: (S.DartsNet(4, 3, num_cells=3, num_nodes=2, in_channels=1).eval(), img(1))),
        Case("FactorizedReduce", S.FactorizedReduce, lambda: (S.FactorizedReduce(4, 4).eval(), img())),
        Case("PrunedEdge", S.PrunedEdge, lambda: (S.PrunedEdge(S.ReLUConvBN(4, 3).eval()), img())),
        Case("AddEncoding", S.AddEncoding,
             lambda: (S.AddEncoding(nn.Identity()), (torch.randn(2, 12, 16, generator=_g()),)), note="with nn.Identity"),
        Case("EncodingSearch", S.EncodingSearch,
             lambda: (S.EncodingSearch(16, (3, 4)).eval(), (torch.randn(2, 12, 16, generator=_g()),))),
        Case("SequenceEncoding", S.SequenceEncoding,
             lambda: (S.SequenceEncoding(create_encoding("sinusoidal", in_dim=1, num_features=16), 16).eval(),
                      (torch.randn(2, 12, 16, generator=_g()),)), note='of create_encoding("sinusoidal")'),
        Case("NodeEncoding", S.NodeEncoding, _node_encoding, note='"random_walk_pe", fed a ring of 12 nodes'),
        Case("PESearchNet", S.PESearchNet, lambda: (S.PESearchNet(8, 3, dim=16, depth=1, num_heads=2).eval(), img(1))),
    ]


def _interop_cases() -> list[Case]:
    from posenc import create_encoding
    from posenc.interop import TimmPositionEncoding

    class _Step(nn.Module):  # the call timm's _pos_embed makes, with fixed grid and prefix
        def __init__(self):
            super().__init__()
            self.pe = TimmPositionEncoding(create_encoding("lff", in_dim=2, num_features=16),
                                           torch.zeros(1, 1, 16))

        def forward(self, patches, cls):
            return self.pe(patches, (3, 4), [cls])

    return [Case("TimmPositionEncoding", TimmPositionEncoding,
                 lambda: (_Step().eval(), (torch.randn(2, 12, 16, generator=_g()), torch.randn(2, 1, 16, generator=_g()))),
                 note="with an LFF encoding")]


def cases() -> list[Case]:
    return [*_encoding_cases(), *_attention_cases(), *_graph_cases(), *_model_cases(), *_search_cases(),
            *_interop_cases()]


def public_modules() -> dict[str, type]:
    """``{name: class}`` of every ``nn.Module`` subclass in :data:`PUBLIC_MODULES`' ``__all__``."""
    out: dict[str, type] = {}
    for modname in PUBLIC_MODULES:
        mod = importlib.import_module(modname)
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if inspect.isclass(obj) and issubclass(obj, nn.Module):
                out.setdefault(obj.__name__, obj)
    return out


def public_home(cls: type) -> str:
    """The public module that exports ``cls`` (the most specific one of :data:`PUBLIC_MODULES`)."""
    for modname in sorted(PUBLIC_MODULES, key=lambda m: -m.count(".")):
        mod = importlib.import_module(modname)
        if cls.__name__ in getattr(mod, "__all__", []) and getattr(mod, cls.__name__) is cls:
            return modname
    raise ValueError(f"{cls.__name__} is not exported by any of {', '.join(PUBLIC_MODULES)}")


# --------------------------------------------------------------------------- probing
def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a is None and b is None


def _why(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    msg = lines[0] if lines else ""
    msg = msg if len(msg) <= 110 else msg[:107] + "..."
    return f"{type(exc).__name__}: {msg}".rstrip(": ")


def _try(run: Callable[[], Any], ref: Any) -> str:
    quiet = io.StringIO()  # failing traces print whole graphs; the reason is in the exception
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            warnings.simplefilter("ignore")
            out = run()
    except Exception as exc:  # noqa: BLE001 -- every failure is a "no" with its reason
        return f"no ({_why(exc)})"
    return "yes" if _same(out, ref) else "no (runs, but the output differs from eager mode)"


def _built(case: Case) -> tuple[nn.Module, tuple, dict, Any]:
    """``(module, args, kwargs, eager output)`` of a case, built from seed 0."""
    torch.manual_seed(0)
    built = case.build()
    module, args = built[0], built[1]
    kwargs = built[2] if len(built) > 2 else {}
    with torch.no_grad():
        ref = module(*args, **kwargs)
    return module, args, kwargs, ref


def _script_check(module: nn.Module, args: tuple, kwargs: dict, ref: Any) -> str:
    """The ``jit.script`` check in this process: ``yes`` / ``no (why)``."""
    def scripted():
        _fresh_torchscript()  # a failed script leaves half-compiled classes that would fail the next case
        with torch.no_grad():
            return torch.jit.script(module)(*args, **kwargs)

    try:
        return _try(scripted, ref)
    finally:
        _fresh_torchscript()


#: Seconds a fresh process may take to import torch and script one case.
FRESH_TIMEOUT_S = 300.0


def script_in_fresh_process(case: Case) -> str:
    """The ``jit.script`` check of ``case`` in a new Python process: ``yes`` / ``no (why)``.

    The process runs ``python -m tools.support --script-case LABEL`` (one torch thread), which
    builds the case as :func:`probe_case` does and prints its result as one JSON line.

    Raises:
        RuntimeError: the process failed or printed no result (the probe, not the module, broke).
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "tools.support", "--script-case", case.label], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=FRESH_TIMEOUT_S, check=False)
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])["jit.script"] if proc.returncode == 0 and lines else None
    except (ValueError, KeyError, TypeError):
        result = None
    if not isinstance(result, str):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the fresh process scripting {case.label} failed (exit code {proc.returncode}): {tail}")
    return result


def probe_case(case: Case) -> dict[str, str]:
    """Run the three checks on one case; ``{"compile", "export", "jit.script"}`` -> ``yes`` / ``no (why)``.

    ``jit.script`` runs in this process, or in a fresh one for a case marked ``fresh``.
    """
    import logging

    import torch._dynamo

    module, args, kwargs, ref = _built(case)

    def compiled():
        torch._dynamo.reset()
        with torch.no_grad():
            return torch.compile(module, backend="eager", fullgraph=True)(*args, **kwargs)

    def exported():
        program = torch.export.export(module, args, kwargs)
        with torch.no_grad():
            return program.module()(*args, **kwargs)

    logging.disable(logging.CRITICAL)  # failed exports log whole graphs; the reason is in the exception
    try:
        script = script_in_fresh_process(case) if case.fresh else _script_check(module, args, kwargs, ref)
        case.results = dict(zip(CHECKS, (_try(compiled, ref), _try(exported, ref), script)))
    finally:
        logging.disable(logging.NOTSET)
        torch._dynamo.reset()
        _fresh_torchscript()
    return case.results


def _fresh_torchscript() -> None:
    """Forget every class TorchScript compiled so far, so each case is scripted as in a new process."""
    import torch.jit._recursive
    import torch.jit._state

    torch.jit._state._python_cu = torch._C.CompilationUnit()
    torch.jit._recursive.concrete_type_store = torch.jit._recursive.ConcreteTypeStore()
    torch.jit._state._clear_class_state()


# --------------------------------------------------------------------------- the page
def _cell(result: str) -> str:
    if not result.startswith("no ("):
        return result
    reason = result[4:-1].replace("`", "'").replace("|", "/")
    return f"no: `{reason}`"


def render_row(case: Case) -> str:
    """One table row: the case's label and its three results."""
    label = f"`{case.label}`" + (f" ({case.note})" if case.note else "")
    cells = [_cell(case.results[k]) for k in CHECKS]
    return "| " + " | ".join([label, *cells]) + " |"


def page_verdicts(page: str) -> dict[str, tuple[str, ...]]:
    """``{label: ("yes" | "no", ...)}`` per row of a page, in :data:`CHECKS` order."""
    out = {}
    for line in page.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            label = cells[0].split("`")[1]
            out[label] = tuple("yes" if c == "yes" else "no" for c in cells[1:])
    return out


def verdicts(case: Case) -> tuple[str, ...]:
    return tuple("yes" if case.results[k] == "yes" else "no" for k in CHECKS)


def probed_torch_version(page: str) -> str | None:
    """The torch version a page was probed with (from its "Probed with torch X" line)."""
    for line in page.splitlines():
        if line.startswith("Probed with torch "):
            return line.split()[3]
    return None


def render(probed: list[Case]) -> str:
    """The markdown page (a pure function of the probe results and the torch version)."""
    by_module: dict[str, list[Case]] = {}
    for case in probed:
        by_module.setdefault(public_home(case.cls), []).append(case)
    torch_version = torch.__version__.split("+")[0]
    lines = [
        "# torch.compile, torch.export and TorchScript support",
        "",
        "<!-- generated by `python -m tools.support` (make support): do not edit by hand -->",
        "",
        f"Probed with torch {torch_version} on the CPU, each module small and in evaluation mode:",
        "",
        '- **compile**: `torch.compile(module, backend="eager", fullgraph=True)` (a graph break fails '
        "`fullgraph=True`; the `eager` backend traces like any other but generates no code);",
        "- **export**: `torch.export.export(module, args)`, then the exported program on the same inputs;",
        "- **jit.script**: `torch.jit.script(module)` (TorchScript is deprecated in PyTorch in favour of "
        "the two above).",
        "",
        "\"yes\" means it ran and its output equals eager mode's (rtol 1e-4); \"no\" gives the first line of the "
        "error (TorchScript's can depend on what was scripted before in the same process: the `posenc.graph` "
        "modules are scripted in a fresh process each, so their reasons do not). `make support` "
        "regenerates this page; `tests/test_support_table.py` re-probes every row and fails when a yes or no "
        "here is no longer true.",
        "",
    ]
    for module, group in by_module.items():
        lines += [f"## `{module}`", "", "| module | compile | export | jit.script |", "|---|---|---|---|"]
        lines += [render_row(c) for c in group]
        lines.append("")
    lines += ["Public modules not probed:", ""]
    lines += [f"- `{name}`: {why}." for name, why in NOT_PROBED.items()]
    return "\n".join(lines).rstrip() + "\n"


def probe_all(selected: list[Case] | None = None) -> list[Case]:
    todo = cases() if selected is None else selected
    for case in todo:
        probe_case(case)
    return todo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.support", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=TABLE, help="the page to write (default: docs/api/support.md)")
    parser.add_argument("--check", action="store_true", help="compare with the page instead of writing it")
    parser.add_argument("--script-case", metavar="LABEL", default=None,
                        help="print the jit.script result of one case as JSON (what a fresh process runs)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.script_case is not None:
        by_label = {case.label: case for case in cases()}
        if args.script_case not in by_label:
            print(f"error: --script-case {args.script_case!r} is not a case label", file=sys.stderr)
            return 2
        import logging

        logging.disable(logging.CRITICAL)
        module, call_args, kwargs, ref = _built(by_label[args.script_case])
        print(json.dumps({"jit.script": _script_check(module, call_args, kwargs, ref)}))
        return 0
    text = render(probe_all())
    if args.check:
        old = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if old != text:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                       str(args.out), "probed now"))
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
