"""Coordinate encodings: throughput against the memory-bound floor, and fit-image cost.

* Throughput: each encoding at N = 2**18 positions, D = 1000 features (float32),
  coordinates per second, and the ratio of its time to the time of allocating and
  writing an (N, D) float32 tensor (the floor any encoding that returns that tensor
  pays), measured round-robin with the floor, 5 rounds, one thread; each encoding's
  first call (its warm-up, timed) beside it. The encodings have no ``check_inputs``
  switch: their check is one reduction over the positions.
* fit-image on a 256 x 256 photograph with the Gaussian encoding: time, PSNR and
  peak memory for linear, MLP and lstsq, each beside the same loop written
  naively (the dense feature matrix of every pixel built at once), each case in
  its own subprocess so peak memory is its own.
"""

from __future__ import annotations

import math

import torch

from benchmarks.common import timed_first, timeit
from benchmarks.isolated import run_isolated

ENCODINGS = {
    "gaussian": dict(sigma=0.002),
    "gaussian (truncate=4)": dict(sigma=0.002, truncate=4.0),
    "triangle": dict(width=0.004),
    "basic": {},
    "linf": dict(max_freq=100.0),
    "logf": dict(max_freq=256.0),
    "rff": dict(sigma=50.0),
    "impulse": {},
    "random": {},
}


def throughput(n: int, d: int, threads: int, rounds: int = 5) -> dict:
    """Each encoding and the floor timed round-robin, ``rounds`` times; ratios are per round.

    The floor is ``torch.empty(n, d).fill_(1.0)``: allocating and writing the (N, D)
    float32 output, which every encoding that returns it pays. In each round every case
    runs once, in the same order, so a change of machine load hits all of them alike;
    the reported ratio is the median over rounds of (encoding time / floor time of that
    round), scaled by ``out_dim / d`` for encodings of another width.
    """
    import os
    import statistics
    import time

    from posenc import create_encoding

    torch.set_num_threads(threads)
    x = torch.rand(n, 1, generator=torch.Generator().manual_seed(0))
    out = torch.empty(n, d)
    cases = {"write_floor": lambda: out.fill_(1.0), "alloc_write_floor": lambda: torch.empty(n, d).fill_(1.0)}
    encs = {}
    for label, kw in ENCODINGS.items():
        name = label.split(" ")[0]
        encs[label] = enc = create_encoding(name, **({} if name == "basic" else {"num_features": d}), **kw)
        cases[label] = lambda enc=enc: enc(x)
    first = timed_first(cases)  # the warm-up, timed: each case's first call at this shape
    times: dict[str, list[float]] = {k: [] for k in cases}
    load_before = os.getloadavg()
    for _ in range(rounds):
        for key, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    floors = times["alloc_write_floor"]
    rows = {}
    for label, enc in encs.items():
        ratios = [t / (f * enc.out_dim / d) for t, f in zip(times[label], floors)]
        rows[label] = {"out_dim": enc.out_dim, "seconds": statistics.median(times[label]),
                       "coords_per_s": n / statistics.median(times[label]),
                       "ratio_to_floor": statistics.median(ratios), "ratios_per_round": ratios,
                       "first_s": first[label]}
    return {"n": n, "d": d, "threads": threads, "rounds": rounds,
            "write_floor_s": statistics.median(times["write_floor"]),
            "alloc_write_floor_s": statistics.median(floors), "encodings": rows,
            "load_average_before": load_before, "load_average_after": os.getloadavg()}


def fit_image_case(model: str, naive: bool, size: int, iters: int, features: int, threads: int) -> dict:
    """One fit-image run; ``naive`` builds the dense features of all pixels at once."""
    import time

    from posenc import create_encoding
    from posenc.data.images import sample_image
    from posenc.models.coordinate import fit_coordinates, make_mlp, psnr
    from posenc.positions import grid, subsample_mask

    torch.set_num_threads(threads)
    img = sample_image("china", size=size).to(torch.float32)
    pos = grid((size, size), dtype=torch.float32)
    mask = subsample_mask((size, size), 2)
    sigma = 0.5 / size  # about half the training spacing: see suggest_bandwidth
    enc = create_encoding("gaussian", in_dim=2, num_features=features, sigma=sigma, normalize=True)
    if not naive:
        res = fit_coordinates(enc, pos[mask], img[mask], pos[~mask], img[~mask], model, iters=iters,
                              predict_x=pos.reshape(-1, 2))
        return {"seconds": res.seconds, "train_psnr": res.train_psnr, "test_psnr": res.test_psnr}
    t0 = time.perf_counter()
    feats = enc(pos.reshape(-1, 2))  # (size*size, D) at once: the naive way
    flat_mask = mask.reshape(-1)
    y = img.reshape(-1, img.shape[-1])
    a, b = feats[flat_mask], y[flat_mask]
    if model == "lstsq":
        a64 = torch.cat((a.double(), torch.ones(a.shape[0], 1, dtype=torch.float64)), 1)
        w = torch.linalg.lstsq(a64, b.double(), driver="gelsd").solution
        pred = (torch.cat((feats.double(), torch.ones(feats.shape[0], 1, dtype=torch.float64)), 1) @ w).float()
    else:
        torch.manual_seed(0)
        net = torch.nn.Linear(features, y.shape[1]) if model == "linear" else make_mlp(features, y.shape[1])
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        for _ in range(iters):
            opt.zero_grad()
            loss = (net(a) - b).pow(2).mean()
            loss.backward()
            opt.step()
        with torch.no_grad():
            pred = net(feats)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "train_psnr": psnr(pred[flat_mask], b), "test_psnr": psnr(pred[~flat_mask], y[~flat_mask])}


def run(quick: bool = False) -> dict:
    # One thread: on the shared 2-core machine two OpenMP threads wait on each other whenever
    # another job holds a core, which makes every time (the floor's too) swing by several x.
    threads = 1
    fit_threads = 2  # the fit-image cases compare ours with the naive loop side by side, as before
    n = 2**14 if quick else 2**18
    size = 64 if quick else 256
    iters = {"linear": 50 if quick else 300, "mlp": 20 if quick else 100, "lstsq": 1}
    features = 512
    enc = run_isolated("bench_coords", "throughput", n=n, d=1000, threads=threads, rounds=3 if quick else 5)
    fits = {}
    for model in ("lstsq", "linear", "mlp"):
        ours = run_isolated("bench_coords", "fit_image_case", model=model, naive=False, size=size,
                            iters=iters[model], features=features, threads=fit_threads)
        naive = run_isolated("bench_coords", "fit_image_case", model=model, naive=True, size=size,
                             iters=iters[model], features=features, threads=fit_threads)
        fits[model] = {
            "iters": iters[model], "posenc": ours, "naive": naive,
            "time_ratio": ours.get("seconds", math.nan) / naive.get("seconds", math.nan) if "error" not in naive else None,
            "memory_ratio": ours.get("peak_rss_mb", math.nan) / naive.get("peak_rss_mb", math.nan) if "error" not in naive else None,
        }
    result = {"throughput": enc, "fit_image": {"size": size, "features": features, "encoding": "gaussian (separable)",
                                               "models": fits}}
    if not quick:
        # The memory case: 512 x 512 with D = 1000 (the naive feature matrix alone is 1 GB).
        ours = run_isolated("bench_coords", "fit_image_case", model="lstsq", naive=False, size=512, iters=1,
                            features=1000, threads=fit_threads)
        naive = run_isolated("bench_coords", "fit_image_case", model="lstsq", naive=True, size=512, iters=1,
                             features=1000, threads=fit_threads)
        result["fit_image"]["large"] = {"size": 512, "features": 1000, "posenc": ours, "naive": naive}
    return result
