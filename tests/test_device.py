"""The same numbers on an accelerator as on the CPU (skipped where there is none).

Runs on CUDA when a device is present; ``POSENC_TEST_DEVICE=cpu`` runs the same
checks on the CPU (how the tests themselves are checked on a machine without one).
Every case builds the module on the CPU, moves a copy to the device, and compares
the device's float32 result with the CPU's float64 result.
"""

import copy
import os

import pytest
import torch

from posenc.attention import (
    AxialRotaryEmbedding,
    RelativeMHA,
    RotaryEmbedding,
    alibi_kernelized_attention,
    alibi_slopes,
    apply_rope,
    kernelized_attention,
    rpe_coeffs,
)
from posenc.encodings import available_encodings, create_encoding

_DEVICE = os.environ.get("POSENC_TEST_DEVICE") or ("cuda" if torch.cuda.is_available() else None)
pytestmark = pytest.mark.skipif(_DEVICE is None, reason="needs a CUDA device (or POSENC_TEST_DEVICE)")
DEV = torch.device(_DEVICE or "cpu")


def _close(got: torch.Tensor, ref: torch.Tensor, tol: float = 2e-5) -> None:
    assert got.device.type == DEV.type
    torch.testing.assert_close(got.detach().cpu().double(), ref.detach().cpu().double(), rtol=tol, atol=tol)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("inplace", [False, True])
def test_rope_module(layout, inplace):
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, 300, 64, generator=g, dtype=torch.float64), torch.randn(2, 4, 300, 64, generator=g,
                                                                                       dtype=torch.float64)
    rope = RotaryEmbedding(64, layout=layout, device=DEV)
    rq, rk = rope(q.float().to(DEV), k.float().to(DEV), inplace=inplace)
    assert rope._cos.device.type == DEV.type  # the cache lives where the inputs are
    _close(rq, apply_rope(q, layout=layout))
    _close(rk, apply_rope(k, layout=layout))
    bq, _ = rope(q.to(DEV, torch.bfloat16), k.to(DEV, torch.bfloat16), inplace=inplace)
    assert bq.dtype == torch.bfloat16
    _close(bq, apply_rope(q, layout=layout), tol=4e-2)


def test_rope_compiled_matches_eager():
    # the default backend: Triton kernels on CUDA, C++ on the CPU
    rope = RotaryEmbedding(32, device=DEV)
    q, k = torch.randn(2, 4, 64, 32, device=DEV), torch.randn(2, 4, 64, 32, device=DEV)
    fn = torch.compile(rope, fullgraph=True)
    for got, ref in zip(fn(q, k), rope(q, k)):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_axial_rope():
    mod = AxialRotaryEmbedding(16, 2).double()
    pos = torch.rand(10, 2, dtype=torch.float64) * 7
    q = torch.randn(1, 2, 10, 16, dtype=torch.float64)
    ref = mod(q, q, pos)[0]
    dev = copy.deepcopy(mod).float().to(DEV)
    _close(dev(q.float().to(DEV), q.float().to(DEV), pos.float().to(DEV))[0], ref)


@pytest.mark.parametrize("name", available_encodings())
def test_encodings(name):
    try:
        enc = create_encoding(name, in_dim=2)
    except (TypeError, ValueError):
        enc = create_encoding(name)
    enc = enc.double().eval()  # CAPE augments only in training mode
    in_dim = getattr(enc, "in_dim", 2)
    g = torch.Generator().manual_seed(1)
    if getattr(enc, "positions_kind", "") == "index":  # a table takes integer grid indices
        x = torch.randint(0, 8, (50, in_dim), generator=g).double()
    else:
        x = torch.rand(50, in_dim, generator=g, dtype=torch.float64)
    ref = enc(x)
    dev = copy.deepcopy(enc).float().to(DEV)
    _close(dev(x.float().to(DEV)), ref, tol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_kernelized_attention_fft(causal):
    g = torch.Generator().manual_seed(2)
    n, m, d, H = 257, 16, 8, 3
    phi_q = torch.rand(2, H, n, m, generator=g, dtype=torch.float64)
    phi_k = torch.rand(2, H, n, m, generator=g, dtype=torch.float64)
    v = torch.randn(2, H, n, d, generator=g, dtype=torch.float64)
    coeffs = rpe_coeffs(torch.randn(H, 2 * n - 1, generator=g, dtype=torch.float64), n, causal=causal)
    ref = kernelized_attention(phi_q, phi_k, v, coeffs, causal=causal, method="dense")
    got = kernelized_attention(*(t.float().to(DEV) for t in (phi_q, phi_k, v, coeffs)), causal=causal, method="fft")
    _close(got, ref, tol=1e-4)
    slopes = alibi_slopes(H).double()
    ref = alibi_kernelized_attention(phi_q, phi_k, v, slopes, causal=causal)
    got = alibi_kernelized_attention(*(t.float().to(DEV) for t in (phi_q, phi_k, v, slopes)), causal=causal)
    _close(got, ref, tol=1e-4)


@pytest.mark.parametrize("position", ["rope", "alibi", "t5", "learned"])
def test_relative_mha_forward_backward(position):
    torch.manual_seed(3)
    mha = RelativeMHA(32, 4, batch_first=True, position=position).double()
    x = torch.randn(2, 40, 32, dtype=torch.float64, requires_grad=True)
    ref, _ = mha(x, x, x, need_weights=False)
    ref.square().sum().backward()
    dev = copy.deepcopy(mha).float().to(DEV)
    xd = x.detach().float().to(DEV).requires_grad_(True)
    out, _ = dev(xd, xd, xd, need_weights=False)
    out.square().sum().backward()
    _close(out, ref, tol=1e-4)
    _close(xd.grad, x.grad, tol=1e-3)
    for (name, p), (_, pd) in zip(mha.named_parameters(), dev.named_parameters()):
        assert pd.grad is not None and pd.grad.device.type == DEV.type, name
