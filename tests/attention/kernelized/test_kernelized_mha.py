"""KernelizedMHA (the nn.MultiheadAttention drop-in) and KernelizedAttentionLayer (posenc's own layer):
conversion from torch without silently dropping dropout, the causal no-RPE path, the renamed layer."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from posenc.attention import KernelizedAttentionLayer, KernelizedMHA, dense_kernelized_attention

D = torch.float64


def _torch_mha(dropout):
    torch.manual_seed(0)
    return nn.MultiheadAttention(16, 4, dropout=dropout, batch_first=True, dtype=D)


def test_from_torch_refuses_dropout_it_cannot_apply():
    src = _torch_mha(0.1)
    with pytest.raises(ValueError, match="dropout"):
        KernelizedMHA.from_torch(src)
    with pytest.raises(ValueError, match="dropout"):  # and cannot be told to apply it
        KernelizedMHA.from_torch(src, dropout=0.1)
    # an explicit dropout=0.0 converts it (e.g. an eval-only model): same projections as the source
    ours = KernelizedMHA.from_torch(src, dropout=0.0, mode="softmax", rpe="none", normalize_qk=False)
    assert ours.dropout == 0.0
    src.eval()
    x = torch.randn(2, 5, 16, dtype=D)
    torch.testing.assert_close(ours(x, x, x, need_weights=False)[0], src(x, x, x, need_weights=False)[0])
    # a source without dropout needs nothing
    assert KernelizedMHA.from_torch(_torch_mha(0.0)).dropout == 0.0


@pytest.mark.parametrize("n", [40, 150])
def test_mha_causal_without_rpe_matches_dense_reference(n):
    # causal rpe="none" runs the chunkwise recurrence (decay factor 1): against the dense float64
    # kernelized attention with the module's own features, values and gradients
    torch.manual_seed(1)
    mha = KernelizedMHA(16, 2, batch_first=True, num_features=8, rpe="none", causal=True, dtype=D)
    x = torch.randn(2, n, 16, dtype=D, requires_grad=True)
    kpm = torch.zeros(2, n, dtype=torch.bool)
    kpm[1, -5:] = True
    out = mha(x, x, x, key_padding_mask=kpm, need_weights=False, is_causal=True)[0]

    att = mha.attention
    q, k, v = (F.linear(x, w, b).view(2, n, 2, 8).transpose(1, 2)
               for w, b in zip(mha.in_proj_weight.chunk(3), mha.in_proj_bias.chunk(3)))
    phi_q, phi_k = att._features(F.normalize(q, dim=-1), F.normalize(k, dim=-1), kpm)
    z = dense_kernelized_attention(phi_q, phi_k, v, torch.zeros(2, 2 * n - 1, dtype=D), causal=True,
                                   key_padding_mask=kpm)
    ref = mha.out_proj(z.transpose(1, 2).reshape(2, n, 16))
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    w = torch.randn(out.shape, dtype=D)
    params = [x, mha.in_proj_weight, mha.in_proj_bias]
    for a, b in zip(torch.autograd.grad((out * w).sum(), params), torch.autograd.grad((ref * w).sum(), params)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    # causality: the future does not leak
    x2 = x.detach().clone()
    x2[:, n // 2:] += 3.0
    out2 = mha(x2, x2, x2, key_padding_mask=kpm, need_weights=False)[0]
    torch.testing.assert_close(out2[:, : n // 2], out.detach()[:, : n // 2], rtol=1e-10, atol=1e-12)


def test_old_layer_name_is_a_deprecated_alias():
    with pytest.warns(DeprecationWarning, match="KernelizedAttentionLayer"):
        from posenc.attention import KernelizedMultiheadAttention
    assert KernelizedMultiheadAttention is KernelizedAttentionLayer
    with pytest.warns(DeprecationWarning, match="KernelizedMHA"):
        from posenc.attention.kernelized.layers import KernelizedMultiheadAttention as again
    assert again is KernelizedAttentionLayer
    import posenc.attention

    assert "KernelizedMultiheadAttention" not in posenc.attention.__all__
    with warnings.catch_warnings():  # the new names import without a warning
        warnings.simplefilter("error")
        from posenc.attention import KernelizedAttentionLayer as new  # noqa: F401
    with pytest.raises(AttributeError):
        posenc.attention.NoSuchLayer  # noqa: B018


def test_layer_and_drop_in_compute_the_same_attention():
    # the two classes differ in interface only: copy the drop-in's projections into the layer
    torch.manual_seed(2)
    mha = KernelizedMHA(16, 2, batch_first=True, num_features=8, max_distance=6, dtype=D)
    layer = KernelizedAttentionLayer(16, 2, num_features=8, max_distance=6, dtype=D)
    with torch.no_grad():
        for proj, w, b in zip((layer.q_proj, layer.k_proj, layer.v_proj), mha.in_proj_weight.chunk(3),
                              mha.in_proj_bias.chunk(3)):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        layer.out_proj.load_state_dict(mha.out_proj.state_dict())
        layer.attention.load_state_dict(mha.attention.state_dict())
    x = torch.randn(2, 9, 16, dtype=D)
    torch.testing.assert_close(layer(x), mha(x, x, x, need_weights=False)[0])


def test_need_weights_default_returns_none_and_warns_once(monkeypatch):
    # nn.MultiheadAttention's default need_weights=True: a drop-in must accept mha(x, x, x)
    from posenc.attention.kernelized import kernelized_mha as module

    monkeypatch.setattr(module, "_warned_need_weights", False)
    torch.manual_seed(0)
    mha = KernelizedMHA(16, 4, batch_first=True)
    x = torch.randn(2, 5, 16)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out, weights = mha(x, x, x)
        again, weights_again = mha(x, x, x)
    assert weights is None and weights_again is None
    torch.testing.assert_close(out, mha(x, x, x, need_weights=False)[0])
    torch.testing.assert_close(again, out)
    mine = [w for w in seen if "no attention weights" in str(w.message)]
    assert len(mine) == 1 and mine[0].category is UserWarning and mine[0].filename == __file__


@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_input_of_another_dtype_is_a_clear_type_error(which):
    mha = KernelizedMHA(16, 4, batch_first=True)
    x = torch.randn(1, 5, 16)
    args = {"query": x, "key": x, "value": x}
    args[which] = x.double()
    with pytest.raises(TypeError, match=rf"{which} has dtype torch.float64 but the module's parameters are "
                                        r"torch.float32: convert one of them"):
        mha(args["query"], args["key"], args["value"], need_weights=False)


def test_deprecated_name_warns_once_per_import():
    for stmt in ("from posenc.attention import KernelizedMultiheadAttention",
                 "from posenc.attention.kernelized.layers import KernelizedMultiheadAttention",
                 "import posenc.attention as a; a.KernelizedMultiheadAttention"):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            exec(stmt, {})
        assert [w.category for w in seen] == [DeprecationWarning], (stmt, [str(w.message) for w in seen])
