"""nn.MultiheadAttention-compatible layers: the same numbers as torch's layer where they must agree,
masks in PyTorch's conventions, the swap into nn.TransformerEncoder (padding, eval fast path, compile)."""

import pytest
import torch
from torch import nn

from posenc.attention import KernelizedMHA, RelativeMHA
from posenc.attention.mha import canonical_key_padding_mask


def _torch_mha(batch_first, bias=True, dropout=0.0):
    torch.manual_seed(0)
    m = nn.MultiheadAttention(16, 4, batch_first=batch_first, bias=bias, dropout=dropout, dtype=torch.float64)
    with torch.no_grad():
        if bias:
            m.in_proj_bias.normal_()
            m.out_proj.bias.normal_()
    return m


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_relative_none_equals_torch(batch_first, bias):
    ref = _torch_mha(batch_first, bias)
    ours = RelativeMHA.from_torch(ref, position="none")
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    if not batch_first:
        x = x.transpose(0, 1)
    kpm = torch.tensor([[False] * 7, [False] * 5 + [True] * 2])
    causal = nn.Transformer.generate_square_subsequent_mask(7, dtype=torch.float64)
    for kwargs in ({}, {"key_padding_mask": kpm}, {"key_padding_mask": torch.zeros(2, 7).masked_fill(kpm, float("-inf")).double()},
                   {"attn_mask": causal}, {"attn_mask": causal.isinf()}, {"attn_mask": causal, "is_causal": True},
                   {"key_padding_mask": kpm, "attn_mask": causal.isinf()}):
        a, wa = ref(x, x, x, **kwargs)
        b, wb = ours(x, x, x, **kwargs)
        torch.testing.assert_close(b, a)
        torch.testing.assert_close(wb, wa)
        a, wa = ref(x, x, x, need_weights=True, average_attn_weights=False, **kwargs)
        b, wb = ours(x, x, x, need_weights=True, average_attn_weights=False, **kwargs)
        torch.testing.assert_close(wb, wa)
        assert ours(x, x, x, need_weights=False, **kwargs)[1] is None


def test_kernelized_softmax_mode_equals_torch():
    # in softmax mode without RPE and with 1/sqrt(d) scaling, KernelizedMHA is ordinary attention:
    # this pins the projection layout and the masks to torch's
    ref = _torch_mha(True)
    ours = KernelizedMHA.from_torch(ref, mode="softmax", rpe="none", normalize_qk=False)
    x, ctx = torch.randn(2, 5, 16, dtype=torch.float64), torch.randn(2, 9, 16, dtype=torch.float64)
    kpm = torch.tensor([[False] * 9, [False] * 6 + [True] * 3])
    a, _ = ref(x, ctx, ctx, key_padding_mask=kpm, need_weights=False)
    b, w = ours(x, ctx, ctx, key_padding_mask=kpm, need_weights=False)
    assert w is None
    torch.testing.assert_close(b, a)


def test_state_dict_keys_match_torch():
    ref = _torch_mha(True)
    ours = RelativeMHA(16, 4, batch_first=True, position="t5", dtype=torch.float64)
    missing, unexpected = ours.load_state_dict(ref.state_dict(), strict=False)
    assert unexpected == [] and missing == ["rel_bias.table"]
    torch.testing.assert_close(ours.in_proj_weight, ref.in_proj_weight)
    kern = KernelizedMHA(16, 4, batch_first=True, dtype=torch.float64)
    missing, unexpected = kern.load_state_dict(ref.state_dict(), strict=False)
    assert unexpected == [] and sorted(missing) == ["attention.bias", "attention.features.weight"]


def _encoder(attn, causal=False):
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
    layer.self_attn = attn
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


@pytest.mark.parametrize("make", [
    lambda: RelativeMHA(16, 4, batch_first=True, position="rope"),
    lambda: RelativeMHA(16, 4, batch_first=True, position="alibi"),
    lambda: KernelizedMHA(16, 4, batch_first=True, num_features=16, rpe="table", max_distance=8),
])
def test_swap_into_transformer_encoder_with_padding(make):
    enc = _encoder(make())
    x = torch.randn(2, 6, 16)
    kpm = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    calls = []
    hook = type(enc.layers[0].self_attn).forward

    def counting(self, *a, **k):
        calls.append(1)
        return hook(self, *a, **k)

    out_train = enc(x, src_key_padding_mask=kpm)
    enc.eval()
    type(enc.layers[0].self_attn).forward = counting
    try:
        with torch.no_grad():
            out_eval = enc(x, src_key_padding_mask=kpm)
    finally:
        type(enc.layers[0].self_attn).forward = hook
    # the fused inference fast path would bypass our attention: it must have been called
    assert len(calls) == 2
    torch.testing.assert_close(out_eval, out_train.detach())
    # padded keys never influence the other tokens
    x2 = x.clone()
    x2[1, 4:] = 100.0
    with torch.no_grad():
        out2 = enc(x2, src_key_padding_mask=kpm)
    torch.testing.assert_close(out2[1, :4], out_eval[1, :4])
    # and a float mask means the same
    with torch.no_grad():
        out3 = enc(x, src_key_padding_mask=torch.zeros(2, 6).masked_fill(kpm, float("-inf")))
    torch.testing.assert_close(out3, out_eval)


def test_causal_encoder_and_compile():
    enc = _encoder(RelativeMHA(16, 4, batch_first=True, position="rope"))
    x = torch.randn(2, 6, 16)
    mask = nn.Transformer.generate_square_subsequent_mask(6)
    ref = enc(x, mask=mask, is_causal=True)
    x2 = x.clone()
    x2[:, -1] += 1.0
    torch.testing.assert_close(enc(x2, mask=mask, is_causal=True)[:, :-1], ref[:, :-1])
    compiled = torch.compile(enc, backend="eager")
    torch.testing.assert_close(compiled(x, mask=mask, is_causal=True), ref)
    kern = _encoder(KernelizedMHA(16, 4, batch_first=True, num_features=16, causal=True))
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 5):
        pytest.skip("needs torch >= 2.5: under torch 2.4.1, torch.compile of this encoder crashes the interpreter "
                    "(a segfault in TorchDynamo's fake-tensor deepcopy; passes with 2.13, 2.5-2.12 not tried)")
    out = torch.compile(kern, backend="eager")(x, mask=mask, is_causal=True)
    torch.testing.assert_close(out, kern(x, mask=mask, is_causal=True))


def test_canonical_key_padding_mask():
    m = torch.tensor([[0.0, float("-inf")]])
    assert canonical_key_padding_mask(m, 1, 2).tolist() == [[False, True]]
    with pytest.raises(ValueError, match="only 0"):
        canonical_key_padding_mask(torch.tensor([[0.0, -1.0]]), 1, 2)
    with pytest.raises(ValueError, match="key_padding_mask"):
        canonical_key_padding_mask(torch.zeros(1, 3, dtype=torch.bool), 1, 2)
    with pytest.raises(TypeError, match="key_padding_mask"):
        canonical_key_padding_mask(torch.zeros(1, 2, dtype=torch.long), 1, 2)


def test_bad_input():
    with pytest.raises(ValueError, match="kdim"):
        RelativeMHA(16, 4, kdim=8)
    with pytest.raises(ValueError, match="add_bias_kv"):
        KernelizedMHA(16, 4, add_bias_kv=True)
    with pytest.raises(ValueError, match="add_zero_attn"):
        RelativeMHA(16, 4, add_zero_attn=True)
    with pytest.raises(ValueError, match="dropout"):
        KernelizedMHA(16, 4, dropout=0.1)
    k = KernelizedMHA(16, 4, batch_first=True)
    x = torch.randn(1, 5, 16)
    with pytest.raises(ValueError, match="causal mask"):
        k(x, x, x, need_weights=False, attn_mask=torch.zeros(5, 5, dtype=torch.bool).fill_diagonal_(True))
    with pytest.raises(ValueError, match="causal=True"):
        k(x, x, x, need_weights=False, is_causal=True)
    with pytest.raises(ValueError, match="batched"):
        k(x[0], x[0], x[0], need_weights=False)
    r = RelativeMHA(16, 4, batch_first=True)
    with pytest.raises(ValueError, match="key must be the query"):
        r(x, torch.randn(1, 5, 16), x)
    with pytest.raises(ValueError, match="attn_mask"):
        r(x, x, x, attn_mask=torch.zeros(3, 3))
    with pytest.raises(TypeError, match="mha"):
        RelativeMHA.from_torch(nn.Linear(3, 3))


# ------------------------------------------------------------------ the plain swap into a default encoder (#22 §5)
def _default_encoder(swap, batch_first=True):
    torch.manual_seed(2)
    # exactly what a user writes: every nn default, enable_nested_tensor=True and dropout 0.1 included
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model=16, nhead=4, batch_first=batch_first), num_layers=2)
    for lyr in enc.layers:
        lyr.self_attn = swap(lyr.self_attn)
    return enc


SWAPS = {
    "relative_rope": lambda a: RelativeMHA.from_torch(a, position="rope"),  # the README's snippet
    "relative_alibi": lambda a: RelativeMHA.from_torch(a, position="alibi"),
    "kernelized": lambda a: KernelizedMHA(16, 4, batch_first=a.batch_first, num_features=16, rpe="table", max_distance=8),
}


@pytest.mark.parametrize("swap", list(SWAPS))
@pytest.mark.parametrize("batch_first", [True, False])
def test_swap_into_a_default_transformer_encoder(swap, batch_first):
    enc = _default_encoder(SWAPS[swap], batch_first)
    assert enc.use_nested_tensor == batch_first  # torch decides this at construction, from the layer it was given
    x = torch.randn(2, 6, 16)
    kpm = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])

    def run(inp, mask=None, seed=0):
        torch.manual_seed(seed)
        inp = inp if batch_first else inp.transpose(0, 1)
        out = enc(inp, src_key_padding_mask=mask)
        return out if batch_first else out.transpose(0, 1)

    x2 = x.clone()
    x2[1, 4:] = 100.0  # padded tokens: must not reach the others
    # training, with and without padding (dropout on: the same seed gives the same masks)
    enc.train()
    out = run(x)
    out.sum().backward()
    assert bool(torch.isfinite(out).all())
    assert enc.layers[0].self_attn.in_proj_weight.grad is not None
    torch.testing.assert_close(run(x, kpm)[1, :4], run(x2, kpm)[1, :4])
    # evaluation (under no_grad the encoder hands nested tensors to self_attn when there is padding)
    enc.eval()
    with torch.no_grad():
        plain = run(x)
        padded = run(x, kpm)
        assert bool(torch.isfinite(padded).all())
        torch.testing.assert_close(padded[0], plain[0])  # sample 0 has no padding
        torch.testing.assert_close(padded[1, :4], run(x2, kpm)[1, :4])
        # the same numbers as the padded path torch takes without nested tensors
        enc.use_nested_tensor = False
        torch.testing.assert_close(run(x, kpm)[:, :4], padded[:, :4])
        torch.testing.assert_close(run(x, kpm)[0], padded[0])
        enc.use_nested_tensor = batch_first
    # evaluation with grad enabled takes the padded path: the same numbers
    torch.testing.assert_close(run(x, kpm)[1, :4], padded[1, :4])


def test_nested_inputs_directly():
    mha = RelativeMHA(16, 4, batch_first=True, position="rope")
    seqs = [torch.randn(5, 16), torch.randn(3, 16)]
    nt = torch.nested.nested_tensor(seqs)
    out, _ = mha(nt, nt, nt, need_weights=False)
    assert out.is_nested
    for seq, o in zip(seqs, out.unbind()):
        torch.testing.assert_close(o, mha(seq[None], seq[None], seq[None], need_weights=False)[0][0])
    with pytest.raises(ValueError, match="nested together"):
        mha(nt, torch.randn(2, 5, 16), nt)


# ------------------------------------------------------------------ refusals (#22 §6, #23 §4)
def test_from_torch_refuses_add_zero_attn():
    src = nn.MultiheadAttention(16, 4, add_zero_attn=True)
    with pytest.raises(ValueError, match="add_zero_attn"):
        RelativeMHA.from_torch(src)
    with pytest.raises(ValueError, match="add_zero_attn"):
        KernelizedMHA.from_torch(src)


def test_nd_rope_is_refused_at_construction():
    for position in ("rope_axial", "rope_mixed"):
        with pytest.raises(ValueError, match="N-D positions"):
            RelativeMHA(16, 4, position=position)


def test_nan_query_with_equal_key_copies_is_not_a_different_key():
    mha = RelativeMHA(16, 4, batch_first=True, position="rope")
    x = torch.randn(1, 5, 16)
    x[0, 2, 3] = float("nan")
    out, _ = mha(x, x.clone(), x.clone(), need_weights=False)  # the copies are the query: accepted (NaN in, NaN out)
    ref, _ = mha(x, x, x, need_weights=False)
    torch.testing.assert_close(out, ref, equal_nan=True)
    y = x.clone()
    y[0, 0, 0] += 1.0
    with pytest.raises(ValueError, match="key must be the query"):
        mha(x, y, x)


def test_dtype_mismatch_names_query():
    mha = RelativeMHA(16, 4, batch_first=True)
    with pytest.raises(TypeError, match="query has dtype torch.float64"):
        mha(torch.randn(1, 5, 16, dtype=torch.float64), None, None)


def test_relative_mha_attn_mask_row_fully_blocked_is_an_error():
    mha = RelativeMHA(16, 4, batch_first=True, position="none")
    x = torch.randn(1, 4, 16)
    allow = torch.ones(4, 4, dtype=torch.bool).tril()  # SDPA's convention passed to an nn.MultiheadAttention drop-in
    with pytest.raises(ValueError, match=r"query row\(s\) \[3\].*True = blocked"):
        mha(x, x, x, attn_mask=allow)
    # torch's own layer gives NaN there
    ref = nn.MultiheadAttention(16, 4, batch_first=True)
    assert bool(ref(x, x, x, attn_mask=allow)[0].isnan().any())


@pytest.mark.parametrize("position", ["alibi", "t5", "learned", "rope", "none"])
def test_export_after_an_eager_call_equals_eager(position):
    # the eager call fills the bias cache; export must neither read it nor key it by data pointers
    torch.manual_seed(0)
    mha = RelativeMHA(16, 4, batch_first=True, position=position).eval()
    x = torch.randn(2, 8, 16)
    with torch.no_grad():
        ref = mha(x, x, x, need_weights=False)[0]
        prog = torch.export.export(mha, (x, x, x), {"need_weights": False})
        out = prog.module()(x, x, x, need_weights=False)[0]
        torch.testing.assert_close(out, ref)
        x2 = torch.randn(2, 8, 16)
        torch.testing.assert_close(prog.module()(x2, x2, x2, need_weights=False)[0], mha(x2, x2, x2, need_weights=False)[0])
