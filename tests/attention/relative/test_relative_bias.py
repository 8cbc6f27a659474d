"""T5 buckets against a scalar re-implementation of Raffel et al.'s description; clipped offsets."""

import math

import numpy as np
import pytest
import torch

from posenc.attention.relative.relative_bias import (
    RelativePositionBias,
    bias_score_mod,
    clipped_buckets,
    offsets_from_positions,
    t5_buckets,
)


def t5_bucket_scalar(rel: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """One offset (key - query) at a time, in numpy float32 as T5's code evaluates the log."""
    ret = 0
    n = -rel
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            ret += num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    val = np.float32(np.log(np.float32(n) / np.float32(max_exact))) / np.float32(math.log(max_distance / max_exact))
    val = max_exact + int(np.float32(val) * np.float32(num_buckets - max_exact))
    return ret + min(val, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("nb,md", [(32, 128), (8, 20), (16, 17)])
def test_t5_buckets_against_scalar_loop(bidirectional, nb, md):
    rel = torch.arange(-300, 301)
    got = t5_buckets(rel, bidirectional=bidirectional, num_buckets=nb, max_distance=md)
    ref = [t5_bucket_scalar(int(r), bidirectional, nb, md) for r in rel]
    assert got.tolist() == ref
    assert int(got.min()) >= 0 and int(got.max()) < nb


def test_t5_buckets_structure():
    b = t5_buckets(torch.arange(-10, 11), bidirectional=True)
    assert b[10].item() == 0  # offset 0
    assert b[11].item() == 17  # +1 in the upper half
    assert b[9].item() == 1  # -1: exact small bucket
    far = t5_buckets(torch.tensor([-128, -1000, 128, 1000]))
    assert far.tolist() == [15, 15, 31, 31]  # shared beyond max_distance


def test_clipped_buckets():
    assert clipped_buckets(torch.tensor([-9, -3, 0, 2, 9]), 3).tolist() == [0, 0, 3, 5, 6]


@pytest.mark.parametrize("kind", ["t5", "clipped"])
def test_module_bias_against_loop(kind):
    mod = RelativePositionBias(3, kind=kind, num_buckets=8, max_distance=10).double()
    with torch.no_grad():
        mod.table.copy_(torch.randn_like(mod.table))
    out = mod(5, 7).detach()
    for h in range(3):
        for i in range(5):
            for j in range(7):
                rel = j - i
                b = (t5_bucket_scalar(rel, True, 8, 10) if kind == "t5" else max(-10, min(10, rel)) + 10)
                assert float(out[h, i, j]) == float(mod.table[h, b])


def test_module_positions_batched():
    mod = RelativePositionBias(2, kind="clipped", max_distance=4)
    with torch.no_grad():
        mod.table.copy_(torch.arange(18.0).view(2, 9))
    pos = torch.tensor([[0, 1, 2], [5, 7, 9]])
    out = mod(q_positions=pos)
    assert out.shape == (2, 2, 3, 3)
    torch.testing.assert_close(out[0], mod(3))
    assert float(out[1, 0, 0, 2]) == float(mod.table[0, 4 + 4])  # offset +4
    with pytest.raises(ValueError, match="integer"):
        mod(q_positions=torch.tensor([0.0, 0.5]))


def test_offsets():
    assert offsets_from_positions(torch.tensor([0, 2]), torch.tensor([1, 5, 6])).tolist() == [[1, 5, 6], [-1, 3, 4]]


@pytest.mark.filterwarnings("ignore:flex_attention called without")
def test_score_mod_matches_bias():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    torch.manual_seed(0)
    mod = RelativePositionBias(2, num_buckets=8, max_distance=16)
    with torch.no_grad():
        mod.table.normal_()
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    offsets = torch.arange(16)[None, :] - torch.arange(16)[:, None]
    out = flex.flex_attention(q, k, v, score_mod=bias_score_mod(mod.table.detach(), mod.buckets(offsets)))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mod(16).detach())
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_bad_input():
    with pytest.raises(ValueError, match="num_buckets"):
        t5_buckets(torch.arange(3), num_buckets=128, max_distance=128)
    with pytest.raises(ValueError, match="num_buckets"):
        RelativePositionBias(2, num_buckets=40, max_distance=32)
    with pytest.raises(ValueError, match="num_buckets"):
        t5_buckets(torch.arange(3), num_buckets=7, max_distance=128)
    with pytest.raises(TypeError, match="relative_position"):
        t5_buckets(torch.arange(3.0))
    with pytest.raises(ValueError, match="num_heads"):
        RelativePositionBias(0)
    with pytest.raises(ValueError, match="kind"):
        RelativePositionBias(2, kind="shaw")
    with pytest.raises(ValueError, match="n_q"):
        RelativePositionBias(2)()


def test_t5_buckets_at_the_int64_extremes():
    # #23 §4: -2**63 has no int64 negation: it gave a negative bucket, and bucket 0 when causal
    lo, hi = torch.iinfo(torch.int64).min, torch.iinfo(torch.int64).max
    rel = torch.tensor([lo, lo + 1, hi, -(2**40), 2**40])
    bi = t5_buckets(rel, bidirectional=True)
    assert bi.tolist() == [15, 15, 31, 15, 31]  # the last bucket of each direction
    causal = t5_buckets(rel, bidirectional=False)
    assert causal.tolist() == [31, 31, 0, 31, 0]  # far past: the last bucket; the future: bucket 0
    for r in (-(2**40), 2**40):
        assert int(t5_buckets(torch.tensor([r]), bidirectional=True)) == t5_bucket_scalar(r, True, 32, 128)


def test_offsets_must_be_exactly_representable():
    with pytest.raises(ValueError, match="2\\*\\*62"):
        offsets_from_positions(torch.tensor([0.0, 1e19]))
    with pytest.raises(ValueError, match="2\\*\\*62"):
        offsets_from_positions(torch.tensor([0, torch.iinfo(torch.int64).min]))
    with pytest.raises(ValueError, match="2\\*\\*62"):
        offsets_from_positions(torch.tensor([-(2**62) - 1, 0]))
    with pytest.raises(ValueError, match="2\\*\\*62"):
        offsets_from_positions(torch.tensor([-(2**62), 0]))
    ok = offsets_from_positions(torch.tensor([-(2**62) + 1, 2**62 - 1]))  # the widest range: its offsets fit
    assert ok.tolist() == [[0, 2**63 - 2], [-(2**63 - 2), 0]]
    assert int(t5_buckets(ok[1:, :1], bidirectional=False)) == 31


def test_toeplitz_expansion_against_the_dense_gather():
    from posenc.attention.relative.relative_bias import toeplitz_from_offsets

    torch.manual_seed(0)
    for kind in ("t5", "clipped"):
        rb = RelativePositionBias(3, kind=kind, num_buckets=8, max_distance=16)
        with torch.no_grad():
            rb.table.normal_()
        for n_q, n_k in ((7, 7), (3, 9), (9, 2), (1, 1)):
            offsets = torch.arange(n_k)[None, :] - torch.arange(n_q)[:, None]
            torch.testing.assert_close(rb(n_q, n_k), rb.table[:, rb.buckets(offsets)])
            causal = rb.toeplitz(n_q, n_k, causal=True)
            assert torch.equal(torch.isneginf(causal), (offsets > 0).expand_as(causal))
    with pytest.raises(ValueError, match="offsets"):
        toeplitz_from_offsets(torch.zeros(5), 3, 4)
