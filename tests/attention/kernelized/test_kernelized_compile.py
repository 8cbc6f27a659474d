"""torch.compile(fullgraph=True) and torch.export of the kernelized attention modules.

Cheap backends (``eager``, ``aot_eager``) keep these tests fast: they trace the same graph as
inductor would (a graph break or a data-dependent guard fails here just as it would there) and
run it without code generation. Outputs and gradients must equal eager mode.
"""

import warnings

import pytest
import torch
import torch._dynamo
from torch import nn

from posenc.attention import KernelizedAttention, KernelizedAttentionLayer, KernelizedMHA

D = torch.float64
CONFIGS = [
    {"rpe": "table", "method": "fft"},
    {"rpe": "table", "method": "fft", "causal": True},
    {"rpe": "decay"},
    {"rpe": "decay", "causal": True},
    {"rpe": "alibi", "causal": True},
    {"rpe": "none"},
    {"rpe": "none", "causal": True},
]


def _id(cfg):
    return "-".join(f"{v}" if k != "causal" else "causal" for k, v in cfg.items())


def _mha(cfg, dtype=D):
    torch.manual_seed(0)
    m = KernelizedMHA(16, 2, batch_first=True, num_features=8, max_distance=9, dtype=dtype, **cfg)
    with torch.no_grad():  # non-trivial RPE parameters
        for p in m.attention.parameters():
            p.normal_(0, 0.5)
    return m


def _inputs(n=70, dtype=D):
    # batch 1 keeps the traced graphs small (the FFT path unrolls its loop over batch x heads)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, n, 16, dtype=dtype, generator=g)
    kpm = torch.zeros(1, n, dtype=torch.bool)
    kpm[0, n - 9:] = True
    return x, kpm


class _Call(nn.Module):
    """``module(x, x, x, key_padding_mask=kpm, need_weights=False)[0]``: the drop-in's self-attention call."""

    def __init__(self, mha):
        super().__init__()
        self.mha = mha

    def forward(self, x, kpm):
        return self.mha(x, x, x, key_padding_mask=kpm, need_weights=False)[0]


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_mha_fullgraph_and_export_equal_eager(cfg):
    # fullgraph=True raises on any graph break; backend "eager" runs the captured graph as is
    call = _Call(_mha(cfg))
    x, kpm = _inputs()
    x.requires_grad_()
    params = [p for p in call.parameters() if p.requires_grad]
    ref = call(x, kpm)
    g_ref = torch.autograd.grad(ref.square().sum(), [x, *params], allow_unused=True)
    torch._dynamo.reset()
    out = torch.compile(call, fullgraph=True, backend="eager")(x, kpm)
    g_out = torch.autograd.grad(out.square().sum(), [x, *params], allow_unused=True)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(g_out, g_ref):
        assert (a is None) == (b is None)
        if b is not None:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    x = x.detach()
    ep = torch.export.export(call, (x, kpm))
    torch.testing.assert_close(ep.module()(x, kpm), ref.detach(), rtol=1e-12, atol=1e-12)
    x2, kpm2 = x.flip(1), kpm.clone()  # the exported program runs other values of the same shapes
    kpm2[0, -12:] = True
    torch.testing.assert_close(ep.module()(x2, kpm2), call(x2, kpm2), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cfg", [{"rpe": "table", "method": "fft"}, {"rpe": "decay"}], ids=_id)
def test_mha_backward_traces_with_aot_eager(cfg):
    # aot_eager also traces the backward (the custom autograd functions' hand-written adjoints)
    call = _Call(_mha(cfg))
    x, kpm = _inputs(40)
    params = [p for p in call.parameters() if p.requires_grad]
    ref = call(x, kpm)
    g_ref = torch.autograd.grad(ref.square().sum(), params)
    torch._dynamo.reset()
    out = torch.compile(call, fullgraph=True, backend="aot_eager")(x, kpm)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad(out.square().sum(), params), g_ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 5),
                    reason="needs torch >= 2.5: under torch 2.4.1, torch.compile of this encoder crashes the interpreter "
                           "(a segfault in TorchDynamo's fake-tensor deepcopy; passes with 2.13, 2.5-2.12 not tried)")
def test_transformer_encoder_with_padding_compiles_in_one_graph():
    # nn.TransformerEncoder turns a bool src_key_padding_mask into a float one: traced without a check
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True, dtype=D)
    layer.self_attn = KernelizedMHA(16, 4, batch_first=True, num_features=8, max_distance=8, dtype=D)
    enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    x = torch.randn(2, 12, 16, dtype=D)
    kpm = torch.zeros(2, 12, dtype=torch.bool)
    kpm[1, 9:] = True
    ref = enc(x, src_key_padding_mask=kpm)
    torch._dynamo.reset()
    out = torch.compile(enc, fullgraph=True, backend="eager")(x, src_key_padding_mask=kpm)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_graph_break_count_is_zero():
    call = _Call(_mha({"rpe": "table", "method": "fft"}))
    explained = torch._dynamo.explain(call)(*_inputs(40))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_mha_causal_mask_argument_traces():
    mha = _mha({"rpe": "table", "causal": True})
    x, _ = _inputs(12)
    mask = nn.Transformer.generate_square_subsequent_mask(12, dtype=D)

    def f(x, mask):
        return mha(x, x, x, attn_mask=mask, need_weights=False)[0]

    ref = f(x, mask)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="eager")(x, mask), ref)
    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="eager")(x, mask.isinf()), ref)


def test_core_and_layer_trace_without_breaks():
    # the other two modules: KernelizedAttention on heads (table RPE, FFT path) and posenc's
    # layer KernelizedAttentionLayer (decay RPE over two chunks), compiled and exported
    torch.manual_seed(0)
    att = KernelizedAttention(2, 4, 8, max_distance=5, method="fft", dtype=D)
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 40, 4, dtype=D, generator=g) for _ in range(3))
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(att, fullgraph=True, backend="eager")(q, k, v), att(q, k, v))
    torch.testing.assert_close(torch.export.export(att, (q, k, v)).module()(q, k, v), att(q, k, v))
    layer = KernelizedAttentionLayer(8, 2, num_features=8, rpe="decay", dtype=D)
    x = torch.randn(1, 70, 8, dtype=D, generator=g)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(layer, fullgraph=True, backend="eager")(x), layer(x))
    torch.testing.assert_close(torch.export.export(layer, (x,)).module()(x), layer(x))


def test_auto_compute_dtype_under_tracing_takes_float64():
    # eager reads the bias range; traced code cannot, and accumulates in float64 (the safe side).
    # With a wide bias both use float64, so compiled == eager exactly; with a narrow one eager
    # uses float32 and the two differ by float32 round-off only; bias_range <= 10 keeps float32 in both.
    x, kpm = _inputs(80, torch.float32)
    for scale, bias_range, exact in ((30.0, None, True), (0.1, None, False), (30.0, 8.0, True)):
        torch.manual_seed(0)
        mha = KernelizedMHA(16, 2, batch_first=True, num_features=8, max_distance=79, method="fft",
                            bias_range=bias_range)
        with torch.no_grad():
            mha.attention.bias.copy_(scale * torch.linspace(-1, 1, 159).abs()[None].expand(2, 159))
        call = _Call(mha)
        ref = call(x, kpm)
        out = torch.export.export(call, (x, kpm)).module()(x, kpm)
        if exact:
            torch.testing.assert_close(out, ref, rtol=0, atol=0)
        else:
            assert not torch.equal(out, ref)
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_eager_checks_still_run():
    mha = _mha({"rpe": "table"})
    x, _ = _inputs(6)
    with pytest.raises(ValueError, match="non-finite"):
        mha(x.masked_fill(torch.zeros_like(x, dtype=torch.bool).index_fill_(1, torch.tensor([2]), True),
                          float("nan")), x, x, need_weights=False)
    with pytest.raises(ValueError, match="every key"):
        mha(x, x, x, key_padding_mask=torch.ones(1, 6, dtype=torch.bool), need_weights=False)
    causal = _mha({"rpe": "table", "causal": True})
    with pytest.raises(ValueError, match="causal mask"):
        causal(x, x, x, attn_mask=torch.zeros(6, 6, dtype=torch.bool), need_weights=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        causal(x, x, x, attn_mask=nn.Transformer.generate_square_subsequent_mask(6, dtype=D), need_weights=False)
