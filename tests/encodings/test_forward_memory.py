"""Forward passes of the encodings refuse, before they allocate, features beyond the memory limit
(#40 part 6): sinusoidal, Fourier (rff, linf), the shifted bases (Gaussian, triangle, circulant)
and CAPE in 1D and 2D. Each refusal names the positions' shape, ``out_dim`` and the limit's source."""

from __future__ import annotations

import pytest
import torch

from posenc._resources import CHECK_ABOVE, LIMIT_ENV, FootprintError
from posenc.encodings import create_encoding
from posenc.encodings._forward_memory import check_forward_memory, coordinate_feature_bytes

# (name, constructor arguments, positions' shape): each asks for at least 1 GiB of features
GIANT = [
    ("sinusoidal", dict(num_features=2**14), (2**15, 1)),
    ("sinusoidal", dict(in_dim=2, num_features=2**14), (2**5, 2**10, 2)),
    ("rff", dict(in_dim=3, num_features=2**12), (2**17, 3)),
    ("rff", dict(in_dim=2, num_features=2**8, mode="product"), (2**13, 2)),
    ("linf", dict(num_features=2**12), (2**17, 1)),
    ("gaussian", dict(num_features=2**12), (2**17, 1)),
    ("gaussian", dict(in_dim=2, num_features=2**12, truncate=3.0), (2**16, 2)),
    ("triangle", dict(num_features=2**12), (2**17, 1)),
    ("circulant", dict(num_features=2**12), (2**14, 1)),  # above the table: int64 shifts per feature
    ("impulse", dict(num_features=2**11), (2**17, 1)),  # gathered from the cached table
    ("cape", dict(num_features=2**12), (1, 2**17, 1)),
    ("cape", dict(in_dim=2, num_features=2**12), (4, 2**15, 2)),
]


@pytest.fixture
def limit_300m(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "300M")


def _positions(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    x = torch.rand(shape)
    return x * 2 - 1 if name == "cape" else x


@pytest.mark.parametrize("name,kw,shape", GIANT, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(GIANT)])
@pytest.mark.parametrize("training", [False, True])
def test_giant_forward_is_refused_naming_the_positions_and_the_source(limit_300m, name, kw, shape, training):
    enc = create_encoding(name, **kw).train(training)
    with pytest.raises(FootprintError) as info:
        enc(_positions(name, shape))
    err, msg = info.value, str(info.value)
    assert err.nbytes > err.limit == 300 * 2**20 and err.nbytes >= 2**30
    assert f"(positions.shape={shape})" in msg and f"(out_dim={enc.out_dim:,})" in msg, msg
    assert f"{type(enc).__name__}'s features of" in msg and "(set by $POSENC_MAX_MEMORY)" in msg, msg
    assert "Encoding.iter_chunks" in msg, msg


def test_chunks_of_a_refused_call_run(limit_300m):
    enc = create_encoding("sinusoidal", num_features=2**14)
    x = torch.arange(2.0**15)[:, None]
    with pytest.raises(FootprintError):
        enc(x)
    first = next(enc.iter_chunks(x, chunk_size=2**10))
    assert first.shape == (2**10, 2**14) and torch.equal(first, enc(x[: 2**10]))


def test_autograd_counts_the_graph(limit_300m):
    # 2**25 features: 128 MiB in the block-wise path (not even checked), about 3x that with autograd
    enc = create_encoding("sinusoidal", num_features=2**12)
    x = torch.rand(2**13, 1)
    assert enc(x).shape == (2**13, 2**12)
    with pytest.raises(FootprintError, match=r"positions\.shape=\(8192, 1\)"):
        enc(x.requires_grad_())
    rff = create_encoding("rff", in_dim=2, num_features=2**12)
    y = torch.rand(2**13, 2)
    assert rff(y).shape == (2**13, 2**12)
    with pytest.raises(FootprintError):
        rff(y.requires_grad_())
    with torch.no_grad():  # no graph: the block-wise path again
        assert rff(y).shape == (2**13, 2**12)


def test_cape_counts_the_batch_a_mask_expands_to(limit_300m):
    enc = create_encoding("cape", in_dim=2, num_features=2**8)
    shared = torch.rand(2**14, 2) * 2 - 1  # (N, 2) shared by a batch of 2**7: 2**29 features
    assert enc(shared).shape == (2**14, 2**8)  # alone: 16 MiB
    mask = torch.zeros(2**7, 2**14, dtype=torch.bool)
    with pytest.raises(FootprintError, match=r"CAPEEncoding's features of 2,097,152 positions"):
        enc(shared, key_padding_mask=mask)


def test_the_check_reads_nothing_for_small_calls_and_other_devices(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "lots")  # would raise a ValueError if the limit were read
    enc = create_encoding("sinusoidal", num_features=2**14)
    check_forward_memory(enc, torch.zeros(2**10, 1), 4.0)  # 64 MiB: below CHECK_ABOVE, nothing read
    huge = torch.empty(2**40, 1, device="meta")
    check_forward_memory(enc, huge, 4.0)  # not this host's memory: not checked
    check_forward_memory(enc, torch.zeros(()), 4.0)  # a scalar is refused by the input check, not here
    with pytest.raises(ValueError, match=LIMIT_ENV):
        check_forward_memory(enc, torch.zeros(2**15, 1), 4.0)  # 2 GiB: the limit is read
    assert 2**15 * 2**14 * 4.0 > CHECK_ABOVE


def test_coordinate_feature_bytes_counts_product_normalize_and_half_precision():
    sep = create_encoding("rff", in_dim=2, num_features=64, mode="separable")
    prod = create_encoding("rff", in_dim=2, num_features=8, mode="product", normalize=True)
    x32, x64, x16 = torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float16)
    assert coordinate_feature_bytes(sep, x32, 4.0) == 4.0
    assert coordinate_feature_bytes(sep, x64, 8.0) == 8.0
    assert coordinate_feature_bytes(sep, x16, 4.0) == 6.0  # computed in float32, cast back to float16
    # the output, the product before the last factor (1/8 of it), the 2 x 8 1D features per 64 outputs
    assert coordinate_feature_bytes(prod, x32, 4.0) == 4.0 + 4.0 / 8 + 4.0 * 16 / 64
    assert coordinate_feature_bytes(prod, x32.requires_grad_(), 4.0) == 4.0 + 0.5 + 1.0 + 4.0  # normalised copy
