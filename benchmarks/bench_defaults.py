"""What a user's default call costs (area ``defaults``): the input checks, and the first call.

Every public hot path is called as a user calls it, with its default arguments, and timed

* beside the same call with ``check_inputs=False`` where the function has that switch
  (``unchecked``; timed round-robin with the default in one process, odd rounds in reverse
  order), and beside the checks the default runs, called alone (``checks``: the validation
  the default call makes, on the same inputs), so that paths without the switch (RoPE,
  ``RelativeMHA``, the encodings, the 2D RPE) have a cost of their checks too;
* at its first call in a fresh process (``python -m benchmarks.isolated``: torch and posenc
  imported, the inputs built, then the call; the import itself is reported apart), against
  the warm calls of the same process, and at its first call at a new shape in that warm
  process (``n - n/4``, memory the process has touched, and ``n + n/4``, fresh memory; the
  same module objects), with the page faults and the kernel's CPU time of each first call.

Each ``(path, n)`` runs in ``PROCESSES`` fresh processes; the medians over them are reported,
with every process's numbers. Wall-clock and CPU times, one torch thread; the verdicts read CPU
time (user + system: the machine is shared, and CPU time leaves out the waits for a core while
still counting the kernel's work on page faults). The Toeplitz product
is also timed against the dense ``n x n`` matrix product (the matrix built beforehand, and
built in the call), the first call included.

The first call also gets its floor: the CPU time the kernel takes to hand out fresh pages for
an output of its size (:func:`first_touch_cpu_s`, measured in the same process after the calls),
over a warm call. No implementation's first call in a fresh process can cost less than
``first_call_floor`` warm calls, so a row whose floor is above the goal cannot meet it
(``first_call_goal_below_floor``), and ``first_call_above_floor`` is the part of the first call
the call itself adds.

A first call also pays, once per process, the setup of each kind of torch kernel it is the first
to use: the matrix product's (the BLAS library's first call: about half a millisecond, whatever the
shapes), a reduction's and a division's (code paged in, dispatch: about 0.1 ms each), which no
implementation that uses such kernels avoids. :func:`kernel_setup_child` measures them on tiny
tensors in fresh processes (:data:`SETUP_OPS`); the child times the same tiny calls right after the
first call, where each is warm exactly when the call used that kind (``first_call_used_kernels``),
and the row's ``first_call_floor_setup`` adds those setups. A first call within ``FLOOR_MARGIN``
(10 %) of that floor counts as met (``first_call_met``): the rest is the kernel's and torch's, not
the call's.

Goals: checks <= 5 % at n >= 4,096 (``check_cost``: default / unchecked - 1), the first call
at a new shape <= 2x a warm call, the FFT Toeplitz product with default arguments >= 5x faster
than the dense matmul at n = 8,192 with 256 channels, its first call included.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from collections.abc import Callable

import torch

from benchmarks.isolated import run_isolated

CHECK_GOAL = 0.05
FIRST_CALL_GOAL = 2.0
#: a first call within this fraction above its floor is at the floor (met): the rest is not the call's
FLOOR_MARGIN = 0.10
DENSE_GOAL = 5.0
TOEPLITZ_CHANNELS = 256
HEADS, FEATURES, HEAD_DIM = 4, 16, 32  # the kernelized paths (the shapes the issue measured)
PROCESSES = 3
MIN_ROUNDS, ROUND_BUDGET_S = 5, 30.0


def _leaf(*shape, g: torch.Generator, positive: bool = False) -> torch.Tensor:
    return torch.rand(*shape, generator=g) if positive else torch.randn(*shape, generator=g)


def build(case: str, n: int, modules: dict | None = None) -> dict[str, Callable[[], object] | None]:
    """The calls of ``case`` at length ``n``: ``default``, ``unchecked`` (or None) and ``checks``.

    ``modules``: the modules built so far in this process, reused (a new shape is a new input to
    the same module, whose caches persist), filled with those this call builds.
    """
    from posenc._checks import all_finite, check_finite

    modules = {} if modules is None else modules

    def module(make):
        if case not in modules:
            torch.manual_seed(0)
            modules[case] = make()
        return modules[case]

    g = torch.Generator().manual_seed(n)
    if case in ("toeplitz", "toeplitz_dense", "toeplitz_dense_build"):
        from posenc.attention.kernelized.toeplitz import DEFAULT_BLOCK_BYTES, toeplitz_dense, toeplitz_matmul

        c = _leaf(2 * n - 1, g=g, positive=True)
        x = _leaf(n, TOEPLITZ_CHANNELS, g=g)
        if case == "toeplitz_dense":
            dense = toeplitz_dense(c, n, n)
            return {"default": lambda: dense @ x, "unchecked": None, "checks": None}
        if case == "toeplitz_dense_build":
            return {"default": lambda: toeplitz_dense(c, n, n) @ x, "unchecked": None, "checks": None}
        y = toeplitz_matmul(c, x, check_inputs=False) if n <= 2048 else torch.randn(n, TOEPLITZ_CHANNELS, generator=g)

        from posenc.attention.kernelized.toeplitz import _fused_checks_pay

        fused = _fused_checks_pay(n, n, TOEPLITZ_CHANNELS, x.dtype, DEFAULT_BLOCK_BYTES)

        def checks():
            check_finite("coeffs", c)
            if fused:  # the FFT path reads the norm of each block of x (in cache), which also bounds the result
                torch.linalg.vector_norm(x)
            else:
                check_finite("x", x)
                all_finite(y)

        return {"default": lambda: toeplitz_matmul(c, x),
                "unchecked": lambda: toeplitz_matmul(c, x, check_inputs=False), "checks": checks}
    if case in ("kernelized", "kernelized_causal", "kernelized_norpe"):
        from posenc.attention.kernelized.kernelized import kernelized_attention, rpe_coeffs

        pq = _leaf(1, HEADS, n, FEATURES, g=g, positive=True)
        pk = _leaf(1, HEADS, n, FEATURES, g=g, positive=True)
        v = _leaf(1, HEADS, n, HEAD_DIM, g=g)
        coeffs = None if case == "kernelized_norpe" else rpe_coeffs(0.1 * _leaf(HEADS, 2 * n - 1, g=g), n)
        causal = case == "kernelized_causal"
        z = torch.randn(1, HEADS, n, HEAD_DIM, generator=g)

        def checks():
            if coeffs is not None or causal:  # plain linear attention reads its checks from the result alone
                for name, t in (("phi_q", pq), ("phi_k", pk), ("v", v), ("coeffs", coeffs)):
                    if t is not None:
                        check_finite(name, t)
            all_finite(z)

        return {"default": lambda: kernelized_attention(pq, pk, v, coeffs, causal=causal),
                "unchecked": lambda: kernelized_attention(pq, pk, v, coeffs, causal=causal, check_inputs=False),
                "checks": checks}
    if case == "decay":
        from posenc.attention.kernelized.decay import decay_kernelized_attention

        pq = _leaf(1, HEADS, n, FEATURES, g=g, positive=True)
        pk = _leaf(1, HEADS, n, FEATURES, g=g, positive=True)
        v = _leaf(1, HEADS, n, HEAD_DIM, g=g)
        a, lam = _leaf(HEADS, 2, g=g, positive=True), _leaf(HEADS, 2, g=g, positive=True)

        def checks():
            for name, t in (("phi_q", pq), ("phi_k", pk), ("v", v), ("a", a), ("lam", lam), ("a'", a), ("lam'", lam)):
                check_finite(name, t)

        return {"default": lambda: decay_kernelized_attention(pq, pk, v, a, lam, (a, lam)),
                "unchecked": lambda: decay_kernelized_attention(pq, pk, v, a, lam, (a, lam), check_inputs=False),
                "checks": checks}
    if case == "kernelized_mha":
        from posenc.attention import KernelizedMHA

        E = HEADS * HEAD_DIM
        x = _leaf(1, n, E, g=g)
        def make():
            pair = [KernelizedMHA(E, HEADS, batch_first=True, num_features=FEATURES, check_inputs=flag)
                    for flag in (True, False)]
            pair[1].load_state_dict(pair[0].state_dict())
            return pair

        mods = module(make)
        q = torch.randn(1, HEADS, n, HEAD_DIM, generator=g)
        feats = torch.rand(1, HEADS, n, FEATURES, generator=g)

        def checks():  # the layer checks q, k, v; kernelized_attention phi_q, phi_k, v and its result
            for name, t in (("q", q), ("k", q), ("v", q), ("phi_q", feats), ("phi_k", feats), ("v", q)):
                check_finite(name, t)
            all_finite(q)

        return {"default": lambda: mods[0](x, x, x, need_weights=False),
                "unchecked": lambda: mods[1](x, x, x, need_weights=False), "checks": checks}
    if case == "rpe2d":
        from posenc.attention.kernelized.rpe2d import kernelized_attention_2d

        side = int(round(n**0.5))
        grid = (side, n // side)
        pq = _leaf(1, HEADS, grid[0] * grid[1], FEATURES, g=g, positive=True)
        pk = _leaf(1, HEADS, grid[0] * grid[1], FEATURES, g=g, positive=True)
        v = _leaf(1, HEADS, grid[0] * grid[1], HEAD_DIM, g=g)
        coeffs = _leaf(HEADS, 2 * grid[0] - 1, 2 * grid[1] - 1, g=g, positive=True)
        def checks():
            for name, t in (("phi_q", pq), ("phi_k", pk), ("v", v), ("coeffs", coeffs)):
                check_finite(name, t)

        return {"default": lambda: kernelized_attention_2d(pq, pk, v, coeffs, grid),
                "unchecked": lambda: kernelized_attention_2d(pq, pk, v, coeffs, grid, check_inputs=False),
                "checks": checks}
    if case in ("rope_module", "rope_functional"):
        from posenc.attention.relative.rotary import RotaryEmbedding, _check_angles, apply_rope, rope_angles
        from posenc.attention.relative.frequencies import rope_frequencies

        q = _leaf(1, 8, n, 64, g=g)
        k = _leaf(1, 8, n, 64, g=g)
        if case == "rope_module":
            rope = module(lambda: RotaryEmbedding(64))
            return {"default": lambda: rope(q, k), "unchecked": None, "checks": None}
        angles = rope_angles(torch.arange(n), rope_frequencies(64, 10000.0))
        return {"default": lambda: (apply_rope(q), apply_rope(k)), "unchecked": None,
                "checks": lambda: (_check_angles(angles), _check_angles(angles))}
    if case in ("relative_mha_rope", "relative_mha_alibi"):
        from posenc.attention import RelativeMHA

        E = 8 * 64
        x = _leaf(1, n, E, g=g)
        mha = module(lambda: RelativeMHA(E, 8, batch_first=True, position=case.rsplit("_", 1)[1]))
        return {"default": lambda: mha(x, x, x, need_weights=False), "unchecked": None, "checks": None}
    if case in ("sinusoidal", "gaussian", "rff"):
        from posenc import create_encoding

        kw = {"sinusoidal": {}, "gaussian": {"sigma": 0.01}, "rff": {"sigma": 10.0}}[case]
        enc = module(lambda: create_encoding(case, num_features=256, **kw))
        pos = torch.rand(n, enc.in_dim, generator=g)
        return {"default": lambda: enc(pos), "unchecked": None, "checks": lambda: enc.check_input(pos)}
    raise ValueError(f"unknown case {case!r}")


CASES = {
    "toeplitz": "toeplitz_matmul(c, x), 256 channels",
    "toeplitz_dense": "dense C @ x, C (n x n) built beforehand, 256 channels",
    "toeplitz_dense_build": "dense toeplitz_dense(c) @ x, built in the call, 256 channels",
    "kernelized": f"kernelized_attention, RPE, {HEADS} heads, m = {FEATURES}, d = {HEAD_DIM}",
    "kernelized_causal": f"kernelized_attention(causal=True), RPE, {HEADS} heads, m = {FEATURES}, d = {HEAD_DIM}",
    "kernelized_norpe": f"kernelized_attention, no RPE, {HEADS} heads, m = {FEATURES}, d = {HEAD_DIM}",
    "decay": f"decay_kernelized_attention, 2 + 2 terms, {HEADS} heads, m = {FEATURES}, d = {HEAD_DIM}",
    "kernelized_mha": f"KernelizedMHA forward, E = {HEADS * HEAD_DIM}, {HEADS} heads, m = {FEATURES}",
    "rpe2d": f"kernelized_attention_2d, a ~sqrt(n) x sqrt(n) grid, {HEADS} heads, m = {FEATURES}, d = {HEAD_DIM}",
    "rope_module": "RotaryEmbedding(64)(q, k), (1, 8, n, 64)",
    "rope_functional": "apply_rope(q), apply_rope(k), (1, 8, n, 64)",
    "relative_mha_rope": "RelativeMHA(512, 8, position='rope') forward",
    "relative_mha_alibi": "RelativeMHA(512, 8, position='alibi') forward",
    "sinusoidal": "create_encoding('sinusoidal', num_features=256)(positions (n, 1))",
    "gaussian": "create_encoding('gaussian', num_features=256, sigma=0.01)(positions (n, 1))",
    "rff": "create_encoding('rff', num_features=256, sigma=10)(positions (n, 1))",
}
#: cases whose n x n work makes n = 8,192 long on one thread: run at n = 4,096 only
SHORT = {"toeplitz_dense_build", "relative_mha_rope", "relative_mha_alibi"}


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def _faults() -> int:
    """Minor page faults of this process so far (first touches of memory the kernel hands out)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _nbytes(result: object) -> int:
    """Bytes of the tensors a call returned (a tensor, or a tuple or list of them)."""
    if isinstance(result, torch.Tensor):
        return result.numel() * result.element_size()
    if isinstance(result, (tuple, list)):
        return sum(_nbytes(r) for r in result)
    return 0


def _first(fn: Callable[[], object]) -> dict:
    """Wall and CPU time of one call, its kernel (system) CPU time, its minor page faults, its result's bytes."""
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    w, c = time.perf_counter(), time.process_time()
    result = fn()
    w, c = time.perf_counter() - w, time.process_time() - c
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return {"s": w, "cpu_s": c, "sys_s": r1.ru_stime - r0.ru_stime, "page_faults": r1.ru_minflt - r0.ru_minflt,
            "output_bytes": _nbytes(result)}


def first_touch_cpu_s(nbytes: int) -> float:
    """CPU time the kernel takes to hand out ``nbytes`` of fresh memory (the page faults of its first writes).

    An anonymous mapping the allocator has never seen is written twice with ``fill_``; the first
    pass pays a page fault per page (the kernel zero-fills each page), the second only the writes,
    so the difference is what writing an output of this size into fresh memory costs beyond
    writing it. Any implementation of a call pays at least this for its result on the first call
    in a process (``first_call_floor``).
    """
    import mmap

    size = max(mmap.PAGESIZE, -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE)
    mm = mmap.mmap(-1, size)
    try:
        t = torch.frombuffer(mm, dtype=torch.uint8)
        c = time.process_time()
        t.fill_(1)
        first = time.process_time() - c
        c = time.process_time()
        t.fill_(2)
        again = time.process_time() - c
        del t
    finally:
        try:
            mm.close()
        except BufferError:  # a view is still alive somewhere: the mapping goes with the process
            pass
    return max(0.0, first - again)


#: Kinds of torch kernel whose first use in a process costs a setup (the library's own first call:
#: code paged in, dispatch and BLAS initialisation), each timed on tiny tensors, in this order
SETUP_OPS = ("matmul", "sum", "div")


def _tiny_op_cpu_s(op: str) -> float:
    """CPU time of one call of ``op`` on tiny tensors: a batched matrix product, a reduction, a division."""
    a, b = torch.ones(1, 4, 16, 8), torch.ones(1, 4, 8, 16)
    fn = {"matmul": lambda: a @ b, "sum": lambda: a.sum(-1), "div": lambda: a.div(2.0)}[op]
    c = time.process_time()
    fn()
    return time.process_time() - c


def _op_probe() -> dict:
    """Each kind's tiny call now, and its warm time: the first is warm exactly when the process has made one."""
    out = {}
    for op in SETUP_OPS:
        first = _tiny_op_cpu_s(op)
        out[op] = {"first_cpu_s": first, "warm_cpu_s": statistics.median(_tiny_op_cpu_s(op) for _ in range(5))}
    return out


def kernel_setup_child() -> dict:
    """In a fresh process: the setup of each kind of kernel in :data:`SETUP_OPS` (its first call less a warm one).

    A first call of a path that uses such a kernel pays its setup once per process, whatever the shapes
    and whatever the implementation (``setup_cpu_s`` is the matrix product's, the largest: the BLAS
    library's first call).
    """
    torch.set_num_threads(1)
    probe = _op_probe()
    setups = {op: max(0.0, p["first_cpu_s"] - p["warm_cpu_s"]) for op, p in probe.items()}
    return {"probe": probe, "setups_cpu_s": setups, "setup_cpu_s": setups["matmul"]}


def child(case: str, n: int, rounds: int, new_shape: bool = True) -> dict:
    """One fresh process: the first call, warm calls round-robin, then the first call at a new shape."""
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    modules: dict = {}
    fns = build(case, n, modules)  # imports the modules of the case (once per process) and makes its inputs
    out: dict = {"case": case, "n": n, "setup_s": time.perf_counter() - t0, "load_before": load}
    before = set(sys.modules)
    with torch.no_grad():
        first = _first(fns["default"])
        out["first_s"], out["first_cpu_s"], out["first_page_faults"] = first["s"], first["cpu_s"], first["page_faults"]
        out["first_sys_s"], out["output_bytes"] = first["sys_s"], first["output_bytes"]
        # modules the first call imported lazily (torch imports some on first use, e.g. sympy)
        out["imported_by_first_call"] = sorted({m.split(".")[0] for m in set(sys.modules) - before})
        # a tiny matrix product, reduction and division now, and again: each first is warm exactly when
        # the call used that kind of kernel (see kernel_setup_child), whose setup the call then paid
        out["ops_after_first"] = _op_probe()
        second = _first(fns["default"])
        out["second_s"], out["second_page_faults"] = second["s"], second["page_faults"]
        timed = {k: f for k, f in fns.items() if f is not None}
        for fn in timed.values():  # two warm-up calls each
            fn()
            fn()
        # slow calls (n x n work) get fewer rounds: about ROUND_BUDGET_S of them, at least MIN_ROUNDS
        per_round = sum(_timed(fn)[0] for fn in timed.values())
        rounds = max(min(rounds, MIN_ROUNDS), min(rounds, int(ROUND_BUDGET_S / max(per_round, 1e-9))))
        out["rounds"] = rounds
        wall: dict = {k: [] for k in timed}
        cpu: dict = {k: [] for k in timed}
        f0 = _faults()
        for r in range(rounds):
            for k in (list(timed) if r % 2 == 0 else list(timed)[::-1]):
                w, c = _timed(timed[k])
                wall[k].append(w)
                cpu[k].append(c)
        out["wall_s"], out["cpu_s"] = wall, cpu
        out["warm_page_faults_per_call"] = (_faults() - f0) / (rounds * len(timed))
        warm = _first(fns["default"])
        out["warm_sys_s"] = warm["sys_s"]
        if new_shape:  # a shorter sequence (memory this process has touched) and a longer one (fresh memory)
            out["new_shapes"] = {}
            for label, m in (("shorter", n - n // 4), ("longer", n + n // 4)):
                other = build(case, m, modules)["default"]
                first = _first(other)
                warm = [_timed(other) for _ in range(3)]
                w, c = statistics.median(t[0] for t in warm), statistics.median(t[1] for t in warm)
                out["new_shapes"][label] = {"n": m, "first_s": first["s"], "first_page_faults": first["page_faults"],
                                            "warm_s": w, "first_over_warm": first["s"] / w,
                                            "first_cpu_s": first["cpu_s"], "warm_cpu_s": c,
                                            "first_over_warm_cpu": first["cpu_s"] / c,
                                            "output_bytes": first["output_bytes"]}
        # last, so that no memory it maps is there for the calls above to reuse
        out["output_first_touch_cpu_s"] = first_touch_cpu_s(out["output_bytes"])
    out["load_after"] = os.getloadavg()[0]
    return out


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _cost(ok: list[dict], clock: str, num: str, den: str) -> float:
    """Median over every round of every process of ``num / den`` (the same round: the same load), minus 1."""
    return statistics.median(a / b for p in ok for a, b in zip(p[clock][num], p[clock][den])) - 1.0


def summarise(procs: list[dict], setups: dict[str, float] | None = None) -> dict:
    """Medians over the processes of one ``(case, n)``, and the verdicts of the goals.

    ``setups``: the setup of each kind of kernel in :data:`SETUP_OPS` (:func:`kernel_setup_child`);
    given, a row's floor has those of the kinds its first call used.

    Wall-clock times are what a user waits; the verdicts read CPU time (this process, user +
    system), which the other jobs on a shared machine disturb least (it leaves out the waits
    for a core) and which still counts the kernel's work on page faults.
    """
    ok = [p for p in procs if "error" not in p]
    if not ok:
        return {"error": procs[0].get("error") if procs else "not run"}
    warm = _median(statistics.median(p["wall_s"]["default"]) for p in ok)
    warm_cpu = _median(statistics.median(p["cpu_s"]["default"]) for p in ok)
    row: dict = {"default_s": warm, "default_cpu_s": warm_cpu, "first_s": _median(p["first_s"] for p in ok),
                 "first_cpu_s": _median(p["first_cpu_s"] for p in ok),
                 "first_sys_s": _median(p.get("first_sys_s") for p in ok),
                 "warm_sys_s": _median(p.get("warm_sys_s") for p in ok),
                 "setup_s": _median(p["setup_s"] for p in ok),
                 "imported_by_first_call": sorted({m for p in ok for m in p["imported_by_first_call"]})}
    row["first_over_warm"] = _median(p["first_s"] / statistics.median(p["wall_s"]["default"]) for p in ok)
    row["first_over_warm_cpu"] = _median(p["first_cpu_s"] / statistics.median(p["cpu_s"]["default"]) for p in ok)
    row["first_page_faults"] = _median(p["first_page_faults"] for p in ok)
    # the least first / warm ratio a call writing this output into fresh memory can have: (warm + the
    # kernel's first touch of the output's pages) / warm, per process
    row["output_bytes"] = ok[0].get("output_bytes")
    row["output_first_touch_cpu_s"] = _median(p.get("output_first_touch_cpu_s") for p in ok)
    row["first_call_floor"] = _median(
        (statistics.median(p["cpu_s"]["default"]) + p["output_first_touch_cpu_s"]) / statistics.median(p["cpu_s"]["default"])
        for p in ok if p.get("output_first_touch_cpu_s") is not None)
    row["second_over_warm"] = _median(p["second_s"] for p in ok) / warm
    row["warm_page_faults_per_call"] = _median(p["warm_page_faults_per_call"] for p in ok)
    for label in ("shorter", "longer"):
        shapes = [p["new_shapes"][label] for p in ok if label in p.get("new_shapes", {})]
        if shapes:
            row[f"new_shape_{label}"] = {
                "n": shapes[0]["n"], "first_s": _median(x["first_s"] for x in shapes),
                "warm_s": _median(x["warm_s"] for x in shapes),
                "first_over_warm": _median(x["first_over_warm"] for x in shapes),
                "first_over_warm_cpu": _median(x.get("first_over_warm_cpu") for x in shapes),
                "first_page_faults": _median(x["first_page_faults"] for x in shapes)}
    if "unchecked" in ok[0]["wall_s"]:
        row["unchecked_s"] = _median(statistics.median(p["wall_s"]["unchecked"]) for p in ok)
        row["unchecked_cpu_s"] = _median(statistics.median(p["cpu_s"]["unchecked"]) for p in ok)
        row["check_cost"] = _cost(ok, "wall_s", "default", "unchecked")
        row["check_cost_cpu"] = _cost(ok, "cpu_s", "default", "unchecked")
        row["check_cost_cpu_per_process"] = [_cost([p], "cpu_s", "default", "unchecked") for p in ok]
    if "checks" in ok[0]["wall_s"]:
        row["checks_alone_s"] = _median(statistics.median(p["wall_s"]["checks"]) for p in ok)
        row["checks_alone_fraction"] = row["checks_alone_s"] / warm
        row["checks_alone_fraction_cpu"] = _median(statistics.median(p["cpu_s"]["checks"]) for p in ok) / warm_cpu
    cost = row.get("check_cost_cpu", row.get("checks_alone_fraction_cpu"))
    row["checks_within_goal"] = None if cost is None else cost <= CHECK_GOAL
    firsts = [row["first_over_warm_cpu"], *(row[f"new_shape_{k}"]["first_over_warm_cpu"]
                                           for k in ("shorter", "longer") if f"new_shape_{k}" in row)]
    row["first_call_within_goal"] = all(r is not None and r <= FIRST_CALL_GOAL for r in firsts)
    floor = row["first_call_floor"]
    # the setups of the kinds of kernel the first call was the first to use: in its floor
    used = {}
    for op, op_setup in (setups or {}).items():
        votes = [p["ops_after_first"][op]["first_cpu_s"] - p["ops_after_first"][op]["warm_cpu_s"] < 0.5 * op_setup
                 for p in ok if op in p.get("ops_after_first", {})]
        if votes and op_setup > 0:
            used[op] = sum(votes) > len(votes) / 2
    row["first_call_used_kernels"] = used or None
    row["first_call_made_matmul"] = used.get("matmul")
    setup = sum(setups[op] for op, u in used.items() if u)
    row["first_call_setup_cpu_s"] = setup
    if floor is not None:
        floor = _median((statistics.median(p["cpu_s"]["default"]) + p["output_first_touch_cpu_s"] + setup)
                        / statistics.median(p["cpu_s"]["default"])
                        for p in ok if p.get("output_first_touch_cpu_s") is not None)
    row["first_call_floor_setup"] = floor
    # the goal is out of reach of any implementation when touching the output's fresh pages (and the kernels'
    # setups) alone costs more than FIRST_CALL_GOAL - 1 warm calls; what is above is the call's own
    row["first_call_goal_below_floor"] = None if floor is None else floor > FIRST_CALL_GOAL
    row["first_call_above_floor"] = None if floor is None else row["first_over_warm_cpu"] - floor
    # at the floor: within FLOOR_MARGIN of it (the new shapes, in a warm process, against the goal or the
    # floor without the setup, which that process has paid)
    at_floor = floor is not None and row["first_over_warm_cpu"] <= (1 + FLOOR_MARGIN) * floor
    row["first_call_within_floor"] = None if floor is None else at_floor
    row["first_call_met"] = row["first_call_within_goal"] or (
        at_floor and all(r is not None and (r <= FIRST_CALL_GOAL or r <= (1 + FLOOR_MARGIN) * row["first_call_floor"])
                         for r in firsts[1:]))
    row["load_average"] = [min(p["load_before"] for p in ok), max(p["load_after"] for p in ok)]
    row["processes"] = procs
    return row


def run(quick: bool = False) -> dict:
    lengths = (1024,) if quick else (4096, 8192)
    procs, rounds = (1, 3) if quick else (PROCESSES, 21)
    load_start = os.getloadavg()
    setup_runs = [run_isolated("bench_defaults", "kernel_setup_child", timeout=300) for _ in range(max(procs, 3))]
    setups = {op: _median(p.get("setups_cpu_s", {}).get(op) for p in setup_runs) for op in SETUP_OPS}
    setups = {op: v for op, v in setups.items() if v is not None}
    rows = []
    for case, label in CASES.items():
        for n in lengths:
            if case in SHORT and n > lengths[0]:
                continue
            runs = [run_isolated("bench_defaults", "child", timeout=900, case=case, n=n, rounds=rounds)
                    for _ in range(procs)]
            rows.append({"case": case, "call": label, "n": n, **summarise(runs, setups)})
            print(f"defaults: {case} n={n} done", file=sys.stderr)
    by = {(r["case"], r["n"]): r for r in rows}
    dense = {}
    for n in lengths:
        fft, mat = by.get(("toeplitz", n)), by.get(("toeplitz_dense", n))
        if fft and mat and "error" not in fft and "error" not in mat:
            dense[str(n)] = {
                "channels": TOEPLITZ_CHANNELS, "fft_default_s": fft["default_s"], "fft_first_s": fft["first_s"],
                "dense_s": mat["default_s"], "dense_first_s": mat["first_s"],
                "speedup_warm": mat["default_s"] / fft["default_s"],
                "speedup_first_call": mat["default_s"] / fft["first_s"],
                "speedup_warm_cpu": mat["default_cpu_s"] / fft["default_cpu_s"],
                "speedup_first_call_cpu": mat["default_cpu_s"] / fft["first_cpu_s"],
                "within_goal": min(mat["default_cpu_s"] / fft["default_cpu_s"],
                                   mat["default_cpu_s"] / fft["first_cpu_s"]) >= DENSE_GOAL,
            }
    big = [r for r in rows if "error" not in r and r["n"] >= 4096 and not r["case"].startswith("toeplitz_dense")]
    return {
        "settings": {"threads": 1, "processes": procs, "rounds": rounds, "lengths": list(lengths),
                     "toeplitz_channels": TOEPLITZ_CHANNELS, "heads": HEADS, "features": FEATURES,
                     "head_dim": HEAD_DIM},
        "goals": {"check_cost_max": CHECK_GOAL, "first_over_warm_max": FIRST_CALL_GOAL,
                  "fft_over_dense_min": DENSE_GOAL, "floor_margin": FLOOR_MARGIN},
        "kernel_setups": {"setups_cpu_s": setups, "processes": setup_runs},
        "rows": rows,
        "toeplitz_vs_dense": dense,
        "verdicts": {
            "checks_within_goal": all(r["checks_within_goal"] is not False for r in big) if big else None,
            "first_call_within_goal": all(r["first_call_within_goal"] for r in big) if big else None,
            "fft_over_dense_within_goal": dense.get("8192", {}).get("within_goal"),
            "misses": [f"{r['case']} n={r['n']}" for r in big
                       if r["checks_within_goal"] is False or not r["first_call_within_goal"]],
            # the goal, or within FLOOR_MARGIN of the floor (the output's first touch and the process's first
            # matrix product where the call made it): what is above is posenc's to cut
            "first_call_met": all(r.get("first_call_met") for r in big) if big else None,
            "first_call_misses_above_floor": [f"{r['case']} n={r['n']}" for r in big if not r.get("first_call_met")],
            "first_call_goal_below_floor": [f"{r['case']} n={r['n']}" for r in big
                                            if r.get("first_call_goal_below_floor")],
        },
        "loadavg_start": list(load_start),
        "loadavg_end": list(os.getloadavg()),
        "notes": ["No GPU is lent to this run: every number is CPU, one torch thread, on a shared machine."],
    }
