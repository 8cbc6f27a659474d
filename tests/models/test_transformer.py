import math

import pytest
import torch
from torch import nn

from posenc.encodings import LearnableFourierEncoding, LearnedTableEncoding, SinusoidalEncoding
from posenc.models import SelfAttention, TinyViT, TransformerEncoder, encode_positions, patch_positions


def test_self_attention_matches_dense_softmax_reference():
    torch.manual_seed(0)
    attn = SelfAttention(8, 2).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    q, k, v = attn.qkv(x).detach().split(8, dim=-1)
    heads = []
    for h in range(2):
        sl = slice(4 * h, 4 * (h + 1))
        out = torch.zeros(2, 5, 4, dtype=torch.float64)
        for b in range(2):
            for i in range(5):
                scores = [float(q[b, i, sl] @ k[b, j, sl]) / math.sqrt(4) for j in range(5)]
                m = max(scores)
                w = [math.exp(s - m) for s in scores]
                z = sum(w)
                out[b, i] = sum(w[j] / z * v[b, j, sl] for j in range(5))
        heads.append(out)
    want = attn.proj(torch.cat(heads, dim=-1))
    torch.testing.assert_close(attn(x).detach(), want.detach(), rtol=0, atol=1e-12)


def test_without_encoding_the_model_is_permutation_equivariant():
    torch.manual_seed(0)
    model = TransformerEncoder(3, 2, dim=16, depth=2, num_heads=2)
    x = torch.randn(2, 7, 3)
    perm = torch.randperm(7)
    torch.testing.assert_close(model(x)[:, perm], model(x[:, perm]), atol=1e-5, rtol=1e-5)


def test_encoding_breaks_permutation_equivariance():
    torch.manual_seed(0)
    model = TransformerEncoder(3, 2, dim=16, encoding=SinusoidalEncoding(in_dim=1, num_features=16))
    x = torch.randn(1, 7, 3)
    pos = torch.arange(7)[:, None]
    perm = torch.tensor([1, 0, 2, 3, 4, 5, 6])
    assert not torch.allclose(model(x, pos)[:, perm], model(x[:, perm], pos), atol=1e-4)


def test_encoding_is_added_to_tokens():
    enc = SinusoidalEncoding(in_dim=1, num_features=8)
    model = TransformerEncoder(2, 1, dim=8, num_heads=2, encoding=enc)
    tokens = torch.randn(2, 5, 2)
    pos = torch.arange(5)[:, None]
    torch.testing.assert_close(model(tokens, pos), model(tokens, pos_features=enc(pos)))


def test_attention_is_replaceable_and_gets_positions():
    seen = []

    class Spy(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.lin = nn.Linear(dim, dim)

        def forward(self, x, positions=None):
            seen.append(None if positions is None else positions.shape)
            return self.lin(x)

    model = TransformerEncoder(2, 1, dim=8, depth=3, num_heads=2, attention=Spy,
                               encoding=SinusoidalEncoding(in_dim=2, num_features=8))
    out = model(torch.randn(4, 6, 2), torch.randn(6, 2))
    assert out.shape == (4, 6, 1)
    assert seen == [torch.Size([6, 2])] * 3


def test_encode_positions_unflattens_groups():
    enc = LearnableFourierEncoding(in_dim=2, num_features=8, num_groups=2)
    pos = torch.randn(3, 5, 4)
    torch.testing.assert_close(encode_positions(enc, pos), enc(pos.reshape(3, 5, 2, 2)))
    with pytest.raises(ValueError, match="positions"):
        encode_positions(enc, torch.randn(3, 5, 2))


def test_transformer_bad_inputs():
    with pytest.raises(ValueError, match="encoding"):
        TransformerEncoder(2, 1, dim=8, num_heads=2, encoding=SinusoidalEncoding(num_features=16))
    with pytest.raises(ValueError, match="dim"):
        TransformerEncoder(2, 1, dim=10, num_heads=4)
    model = TransformerEncoder(2, 1, dim=8, num_heads=2, encoding=SinusoidalEncoding(num_features=8))
    with pytest.raises(ValueError, match="positions"):
        model(torch.randn(1, 5, 2))
    with pytest.raises(ValueError, match="positions"):
        model(torch.randn(1, 5, 2), torch.arange(4)[:, None])
    with pytest.raises(ValueError, match="tokens"):
        model(torch.randn(5, 2), torch.arange(5)[:, None])


def test_patch_positions():
    idx = patch_positions(2, 3)
    assert idx.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    cont = patch_positions(2, 4, "continuous")
    torch.testing.assert_close(cont[:4, 1], torch.tensor([-0.75, -0.25, 0.25, 0.75]))
    torch.testing.assert_close(cont[::4, 0], torch.tensor([-0.5, 0.5]))
    with pytest.raises(ValueError, match="kind"):
        patch_positions(2, 2, "polar")


@pytest.mark.parametrize("cls_token", [True, False])
def test_vit_runs_on_any_size(cls_token):
    torch.manual_seed(0)
    enc = LearnableFourierEncoding(in_dim=2, num_features=16)
    vit = TinyViT(in_channels=1, num_classes=3, patch_size=4, dim=16, num_heads=2, encoding=enc,
                  positions="continuous", cls_token=cls_token)
    for h, w in ((8, 8), (16, 12)):
        assert vit(torch.randn(2, 1, h, w)).shape == (2, 3)


def test_vit_table_resamples_or_fails_clearly():
    tab = LearnedTableEncoding(in_dim=2, grid_size=2, num_features=16, interpolation="bicubic")
    vit = TinyViT(patch_size=4, dim=16, num_heads=2, encoding=tab)
    assert vit(torch.randn(1, 1, 16, 16)).shape == (1, 10)
    strict = TinyViT(patch_size=4, dim=16, num_heads=2,
                     encoding=LearnedTableEncoding(in_dim=2, grid_size=2, num_features=16))
    assert strict(torch.randn(1, 1, 8, 8)).shape == (1, 10)
    with pytest.raises(ValueError, match="size"):
        strict(torch.randn(1, 1, 16, 16))


def test_vit_bad_images():
    vit = TinyViT(patch_size=4, dim=16, num_heads=2, encoding=SinusoidalEncoding(in_dim=2, num_features=16))
    with pytest.raises(ValueError, match="images"):
        vit(torch.randn(1, 1, 10, 8))
    with pytest.raises(ValueError, match="images"):
        vit(torch.randn(1, 8, 8))


def test_tinyvit_takes_any_encoding_without_arguments():
    # coordinate encodings live on [0, 1) (Zheng et al.), LFF/CAPE on [-1, 1]: TinyViT puts the
    # patch centres in the encoding's own domain, so both work as built
    from posenc.encodings import create_encoding
    from posenc.models import TinyViT, patch_positions

    for enc in (create_encoding("gaussian", in_dim=2, num_features=32, sigma=0.1),
                create_encoding("rff", in_dim=2, num_features=32, seed=0),
                create_encoding("lff", in_dim=2, num_features=32)):
        vit = TinyViT(1, 3, patch_size=4, dim=32, num_heads=2, encoding=enc, positions="continuous")
        for size in (8, 16):
            assert vit(torch.randn(2, 1, size, size)).shape == (2, 3)
    p = patch_positions(2, 4, "continuous", domain=(0.0, 1.0), dtype=torch.float64)
    assert p[:, 0].unique().tolist() == [0.25, 0.75] and p[:, 1].unique().tolist() == [0.125, 0.375, 0.625, 0.875]
    torch.testing.assert_close(patch_positions(2, 2, "continuous")[0], torch.tensor([-0.5, -0.5]))
