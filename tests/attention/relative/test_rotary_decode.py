"""RoPE decoding far from position 0: only the rows needed, the same values as the full table,
a clear error past 2**53 and past the angles' precision bound (MAX_ANGLE; see test_rope_precision.py),
a refused table size, and q/k each rotated at its own precision."""

import math

import pytest
import torch

from posenc.attention import RotaryEmbedding
from posenc.attention.relative import rotary as rotary_module
from posenc.attention.relative.rotary import MAX_ANGLE, MAX_POSITION, apply_rope, apply_rope_qk


def _reference(x: torch.Tensor, positions, freqs: torch.Tensor, layout: str = "half") -> torch.Tensor:
    """Rotate ``x (..., n, d)`` pair by pair in Python float64: angle ``p * theta`` (one rounding)."""
    out = x.double().clone()
    r = 2 * freqs.shape[0]
    for t, p in enumerate(positions):
        for i, th in enumerate(freqs.tolist()):
            a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + r // 2)
            c, s = math.cos(float(p) * th), math.sin(float(p) * th)
            xa, xb = x[..., t, a].double(), x[..., t, b].double()
            out[..., t, a], out[..., t, b] = c * xa - s * xb, s * xa + c * xb
    return out


@pytest.mark.parametrize("layout", ["half", "interleaved"])
# the last: the largest offset whose 3 keys stay within MAX_ANGLE (farther offsets: refused)
@pytest.mark.parametrize("offset", [10**6, 10**8, 2 * 10**9, int(MAX_ANGLE) - 2])
def test_decode_at_a_large_offset_against_a_float64_reference(offset, layout):
    g = torch.Generator().manual_seed(0)
    rope = RotaryEmbedding(16, layout=layout)
    q, k = torch.randn(1, 2, 1, 16, generator=g, dtype=torch.float64), torch.randn(1, 2, 3, 16, generator=g,
                                                                                    dtype=torch.float64)
    rq, rk = rope(q, k, offset=offset)
    torch.testing.assert_close(rk, _reference(k, range(offset, offset + 3), rope.freqs, layout), rtol=0, atol=1e-12)
    torch.testing.assert_close(rq, _reference(q, [offset + 2], rope.freqs, layout), rtol=0, atol=1e-12)
    assert rope._cos.shape[0] == 2048  # the table did not grow to offset + n rows


def test_rows_computed_alone_equal_the_full_tables_rows(monkeypatch):
    monkeypatch.setattr(rotary_module, "TABLE_GROWTH_ANGLES", 64)  # the table stops growing at 16 rows
    g = torch.Generator().manual_seed(1)
    alone, full = RotaryEmbedding(8, max_seq_len=None), RotaryEmbedding(8, max_seq_len=5000)
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(2, 3, 8, generator=g, dtype=dtype)
        for off in (0, 20, 999, 4997):
            a, b = alone(x, x, offset=off), full(x, x, offset=off)
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), (dtype, off)
    assert alone._cos.shape[0] <= 16


def test_offsets_beyond_2_53_are_a_clear_error():
    rope = RotaryEmbedding(8)
    x = torch.randn(1, 2, 8)
    for off in (MAX_POSITION - 1, 2**63, 2**80):
        with pytest.raises(ValueError, match=r"offset must be at most 2\*\*53 - n = 9007199254740990 for n = 2"):
            rope(x, x, offset=off)
        with pytest.raises(ValueError, match="offset must be at most 2"):
            apply_rope(x, offset=off)
        with pytest.raises(ValueError, match="offset must be at most 2"):
            apply_rope_qk(x, x, offset=off)
    # the last representable pair of positions is exact, but its angles are beyond RoPE's precision bound
    with pytest.raises(ValueError, match="offset: the positions are too far from 0 for RoPE's precision"):
        rope(x, x, offset=MAX_POSITION - 2)


@pytest.mark.parametrize("inplace", [False, True])
def test_q_and_k_of_different_dtypes_are_each_rotated_at_their_own_precision(inplace):
    g = torch.Generator().manual_seed(2)
    rope = RotaryEmbedding(16)
    q = torch.randn(1, 2, 3, 16, generator=g)
    k = torch.randn(1, 2, 5, 16, generator=g, dtype=torch.float64)
    want_q = _reference(q, range(2, 5), rope.freqs)
    want_k = _reference(k, range(5), rope.freqs)
    rq, rk = rope(q.clone(), k.clone(), inplace=inplace)
    assert rq.dtype == torch.float32 and rk.dtype == torch.float64
    torch.testing.assert_close(rk, want_k, rtol=0, atol=1e-13)  # float64 precision, not float32's
    torch.testing.assert_close(rq, want_q.float(), rtol=0, atol=1e-6)
    # q alone at float32 gives the same bits as in the mixed call (the table is cast, not recomputed)
    assert torch.equal(rope(q, k.float())[0], rq)


def test_a_table_beyond_the_memory_limit_is_refused(monkeypatch):
    monkeypatch.setenv("POSENC_MAX_MEMORY", "1G")
    with pytest.raises(MemoryError, match=r"max_seq_len=100000000.*more than the limit of 1 GiB"):
        RotaryEmbedding(128, max_seq_len=10**8)
