"""Run every ``benchmarks/bench_*.py`` (or the ones named) and save JSON results."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
from pathlib import Path

import benchmarks
from benchmarks.common import environment
from posenc.report.store import atomic_write_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("names", nargs="*", help="areas to run (default: all)")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args(argv)
    found = sorted(
        m.name[len("bench_") :]
        for m in pkgutil.iter_modules(benchmarks.__path__)
        if m.name.startswith("bench_")
    )
    names = args.names or found
    unknown = sorted(set(names) - set(found))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(found)}")
    out = Path(args.out)
    for name in names:
        module = importlib.import_module(f"benchmarks.bench_{name}")
        t0 = time.perf_counter()
        result = module.run(quick=args.quick)
        result = {"benchmark": name, "quick": args.quick, "environment": environment(),
                  "seconds": time.perf_counter() - t0, **result}
        atomic_write_json(out / f"{name}.json", result)
        print(f"{name}: {out / (name + '.json')} ({result['seconds']:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
