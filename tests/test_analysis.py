"""Stable rank, distance preservation, closed forms and bandwidth suggestion."""

import math

import numpy as np
import pytest
import torch

from posenc import create_encoding
from posenc.analysis import (
    distance_preservation,
    embedding_matrix,
    gaussian_dp_width,
    gaussian_stable_rank,
    match_width,
    rff_sigma_for_gaussian,
    similarity_profile,
    stable_rank,
    stable_rank_curve,
    suggest_bandwidth,
    tradeoff_curve,
)


def test_stable_rank_against_numpy_svd():
    rng = np.random.default_rng(0)
    for shape in [(5, 9), (40, 7), (1, 3)]:
        a = rng.normal(size=shape)
        s = np.linalg.svd(a, compute_uv=False)
        assert stable_rank(torch.from_numpy(a)) == pytest.approx((s**2).sum() / s[0] ** 2, rel=1e-10)


def test_stable_rank_extremes():
    assert stable_rank(torch.eye(7)) == pytest.approx(7.0)
    u = torch.randn(20, 1, dtype=torch.float64)
    assert stable_rank(u @ torch.randn(1, 30, dtype=torch.float64)) == pytest.approx(1.0)


@pytest.mark.parametrize("bad,exc,match", [
    (torch.zeros(3, 3), ValueError, "all zeros"),
    (torch.ones(4), ValueError, "2-D"),
    (torch.tensor([[1.0, float("nan")]]), ValueError, "matrix contains"),
    ([[1.0]], TypeError, "matrix must be a torch.Tensor"),
])
def test_stable_rank_bad_input(bad, exc, match):
    with pytest.raises(exc, match=match):
        stable_rank(bad)


@pytest.mark.parametrize("sigma", [0.003, 0.01, 0.03])
def test_gaussian_closed_forms_match_numbers(sigma):
    row = tradeoff_curve("gaussian", [sigma], num_points=1024, num_features=1024)[0]
    assert row["stable_rank"] == pytest.approx(gaussian_stable_rank(sigma), rel=0.03)
    assert row["dp_width"] == pytest.approx(gaussian_dp_width(sigma), rel=0.03)


def test_rff_matched_to_gaussian_has_the_same_width():
    sigma = 0.01
    g = tradeoff_curve("gaussian", [sigma], num_points=1024, num_features=2048)[0]
    r = tradeoff_curve("rff", [rff_sigma_for_gaussian(sigma)], num_points=1024, num_features=4096)[0]
    assert r["dp_width"] == pytest.approx(g["dp_width"], rel=0.1)


def test_distance_preservation_on_a_known_profile():
    d = torch.linspace(-1, 1, 2001, dtype=torch.float64)
    sim = (1 - d.abs() / 0.2).clamp_min(0)  # hat of half-width 0.2
    assert distance_preservation(d, sim, 0.1) == pytest.approx(0.18, abs=1e-9)
    assert distance_preservation(d, sim, 0.5) == pytest.approx(0.10, abs=1e-9)
    # never crossing: the sampled extent is returned
    assert distance_preservation(d, torch.ones_like(d), 0.1) == pytest.approx(1.0)


def test_distance_preservation_bad_input():
    d = torch.linspace(-1, 1, 11)
    with pytest.raises(ValueError, match="equal length"):
        distance_preservation(d, torch.ones(5))
    with pytest.raises(ValueError, match="threshold"):
        distance_preservation(d, torch.ones(11), 1.5)
    with pytest.raises(ValueError, match="must contain 0"):
        distance_preservation(d + 0.05, torch.ones(11))
    with pytest.raises(ValueError, match="similarity contains"):
        distance_preservation(d, torch.full((11,), float("nan")))


def test_similarity_profile_properties():
    disp, sim = similarity_profile("gaussian", 256, num_features=512, sigma=0.02)
    c = int(torch.argmin(disp.abs()))
    assert sim[c] == pytest.approx(1.0)
    assert torch.all(sim <= 1 + 1e-12)
    # the Gaussian similarity is exp(-d^2 / (4 sigma^2)) away from the edges
    mid = disp.abs() < 0.2
    torch.testing.assert_close(sim[mid], torch.exp(-disp[mid] ** 2 / (4 * 0.02**2)), atol=2e-3, rtol=0)
    with pytest.raises(ValueError, match="centre"):
        similarity_profile("gaussian", 64, centre=1.5)
    with pytest.raises(ValueError, match="in_dim=1"):
        similarity_profile(create_encoding("gaussian", in_dim=2), 64)


def test_stable_rank_saturates_for_gaussian_grows_for_rff():
    g = stable_rank_curve("gaussian", [64, 256, 1024], sigma=0.01, num_features=1024)
    assert g[-1]["stable_rank"] == pytest.approx(gaussian_stable_rank(0.01), rel=0.05)
    assert g[-1]["stable_rank"] - g[1]["stable_rank"] < 1.0
    small = stable_rank(embedding_matrix(create_encoding("rff", num_features=16, sigma=40.0), 512))
    large = stable_rank(embedding_matrix(create_encoding("rff", num_features=1024, sigma=40.0), 512))
    assert large > 2 * small


def test_match_width_hits_the_target():
    target = gaussian_dp_width(0.01)
    w = match_width("triangle", target, num_features=1024)
    row = tradeoff_curve("triangle", [w], num_points=1024, num_features=1024)[0]
    assert row["dp_width"] == pytest.approx(target, rel=0.01)
    with pytest.raises(ValueError, match="no width parameter"):
        match_width("impulse", target)


def test_suggest_bandwidth_gaussian_closed_form():
    # u / sqrt(pi) = exp(-u^2), u = h / (2 sigma)  =>  sigma ~ 0.586 h
    u = 0.5
    for _ in range(60):  # fixed point of u = sqrt(-ln(u / sqrt(pi)))
        u = math.sqrt(-math.log(u / math.sqrt(math.pi)))
    for n in (64, 256):
        s = suggest_bandwidth(n, "gaussian", num_features=2048)
        assert s["value"] == pytest.approx(1 / n / (2 * u), rel=0.08)
        assert s["normalised_stable_rank"] == pytest.approx(s["neighbour_similarity"], abs=1e-3)


def test_suggest_bandwidth_bad_input():
    with pytest.raises(ValueError, match="num_samples"):
        suggest_bandwidth(1)
    with pytest.raises(ValueError, match="no width parameter"):
        suggest_bandwidth(64, "random")
    with pytest.raises(ValueError, match="unknown encoding"):
        suggest_bandwidth(64, "nope")
