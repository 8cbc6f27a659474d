"""posenc benchmarks: ``python -m benchmarks`` (``make bench``).

Each ``benchmarks/bench_<area>.py`` defines ``run(quick: bool) -> dict``; the
runner saves ``benchmarks/results/<area>.json`` and prints a summary. Ratios
are measured side by side in one run: the machine is shared and noisy.
"""
