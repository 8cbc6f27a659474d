"""One width parameter with one meaning: ``kernel_width`` gives gaussian, rff and lff the same kernel."""

import math

import pytest
import torch

from posenc.encodings import available_encodings, create_encoding, encoding_parameter_docs


def _kernel(enc, d: torch.Tensor, centre: float = 0.5) -> torch.Tensor:
    """Normalised similarity <psi(x), psi(x + d)> / |psi(x)|^2 at x = centre, for displacements d."""
    x = torch.full((1, enc.in_dim), centre, dtype=torch.float64)
    y = x + d[:, None] * torch.ones(enc.in_dim, dtype=torch.float64) / math.sqrt(enc.in_dim)
    a, b = enc(x), enc(y)
    return (a * b).sum(-1) / (a * a).sum(-1)


def test_kernel_width_gives_matching_kernels():
    w = 0.03
    d = torch.tensor([0.0, 0.01, 0.03, 0.06], dtype=torch.float64)
    want = torch.exp(-(d**2) / (4 * w**2))
    gauss = create_encoding("gaussian", num_features=2000, kernel_width=w, dtype=torch.float64)
    rff = create_encoding("rff", num_features=200_000, kernel_width=w, seed=0, dtype=torch.float64)
    lff = create_encoding("lff", in_dim=1, num_features=200_000, fourier_dim=200_000, use_mlp=False,
                          kernel_width=w, dtype=torch.float64)
    torch.testing.assert_close(_kernel(gauss, d), want, atol=2e-3, rtol=0)
    torch.testing.assert_close(_kernel(rff, d), want, atol=1e-2, rtol=0)
    # LFF's (cos, sin) features give half the kernel of its definition at d = 0 normalised away
    torch.testing.assert_close(_kernel(lff, d), want, atol=1e-2, rtol=0)


def test_kernel_width_maps_to_the_papers_parameters():
    w = 0.02
    assert create_encoding("gaussian", kernel_width=w).sigma == w
    assert create_encoding("rff", kernel_width=w).sigma == pytest.approx(1 / (2 * math.sqrt(2) * math.pi * w))
    assert create_encoding("lff", kernel_width=w).gamma == pytest.approx(math.sqrt(2) * w)
    # the papers' names keep their defaults
    assert create_encoding("gaussian").sigma == 0.01 and create_encoding("rff").sigma == 10.0
    assert create_encoding("lff").gamma == 1.0


def test_both_names_at_once_is_refused():
    with pytest.raises(ValueError, match="sigma or kernel_width"):
        create_encoding("gaussian", sigma=0.1, kernel_width=0.1)
    with pytest.raises(ValueError, match="gamma or kernel_width"):
        create_encoding("lff", gamma=1.0, kernel_width=0.1)
    with pytest.raises(ValueError, match="kernel_width"):
        create_encoding("rff", kernel_width=-1.0)


def test_every_parameter_is_documented():
    for name in available_encodings():
        docs = encoding_parameter_docs(name)
        missing = [k for k, v in docs.items() if not v or v.startswith("see ")]
        assert not missing, f"{name}: {missing}"
    assert "inverse" in encoding_parameter_docs("rff")["sigma"]
    assert all("kernel width" in encoding_parameter_docs(n)["kernel_width"] for n in ("gaussian", "rff", "lff"))
