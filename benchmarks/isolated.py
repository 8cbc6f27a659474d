"""Run one benchmark case in a fresh interpreter and report its result and peak memory.

``python -m benchmarks.isolated MODULE FUNCTION JSON_KWARGS`` imports
``benchmarks.MODULE``, calls ``FUNCTION(**kwargs)`` and prints one JSON line with the
result and ``peak_rss_mb`` (the child's own high-water mark, not the parent's).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

from benchmarks.common import peak_rss_mb


def run_isolated(module: str, function: str, timeout: float = 900.0, **kwargs) -> dict:
    """Call ``benchmarks.<module>.<function>(**kwargs)`` in a subprocess; return its dict + peak memory.

    A failing case is returned as ``{"error": last line of stderr, "returncode": code}``.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.isolated", module, function, json.dumps(kwargs)],
        capture_output=True, text=True, timeout=timeout,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        return {"error": tail[0], "returncode": proc.returncode}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _main() -> None:
    module, function, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    fn = getattr(importlib.import_module(f"benchmarks.{module}"), function)
    result = fn(**kwargs)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


if __name__ == "__main__":
    _main()
