"""timm-layout pos_embed conversions and timm-compatible (antialiased) table resampling."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from posenc.encodings import LearnedTableEncoding, create_encoding, resample_table
from posenc.interop import (
    learned_table_from_pos_embed,
    pos_embed_from_encoding,
    pos_embed_from_table,
    replace_pos_embed,
)
from posenc.models import patch_positions


@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("mode", ["bicubic", "linear"])
@pytest.mark.parametrize("size", [(24, 24), (7, 9), (14, 14)])
def test_resampling_equals_f_interpolate_exactly(antialias, mode, size):
    g = torch.Generator().manual_seed(0)
    table = torch.randn(14, 14, 8, generator=g)
    ours = resample_table(table, size, mode, antialias)
    ref = F.interpolate(table.permute(2, 0, 1)[None], size=size, mode="bicubic" if mode == "bicubic" else "bilinear",
                        align_corners=False, antialias=antialias)[0].permute(1, 2, 0)
    assert torch.equal(ours, ref)


def test_antialias_matters_and_reaches_the_encoding():
    table = LearnedTableEncoding(in_dim=2, grid_size=14, num_features=8, interpolation="bicubic", antialias=True)
    plain = LearnedTableEncoding(in_dim=2, grid_size=14, num_features=8, interpolation="bicubic")
    a, b = table.table((7, 7)).detach(), plain.table((7, 7)).detach()
    assert a.shape == b.shape == (49, 8)
    rel = float((a - b).norm() / b.norm())
    assert rel > 0.3  # shrinking: a low-pass filter vs none
    assert "antialias=True" in repr(table)
    with pytest.raises(TypeError, match="antialias"):
        LearnedTableEncoding(in_dim=2, antialias="yes")


@pytest.mark.parametrize("prefix_tokens", [0, 1, 4])
def test_pos_embed_round_trip(prefix_tokens):
    g = torch.Generator().manual_seed(1)
    pe = torch.randn(1, prefix_tokens + 6 * 5, 16, generator=g)
    table, prefix = learned_table_from_pos_embed(pe, (6, 5), prefix_tokens)
    assert prefix.shape == (prefix_tokens, 16)
    # row-major patch grid: row r, column c is pos_embed row P + r * W + c
    assert torch.equal(table(torch.tensor([[2, 3]]))[0], pe[0, prefix_tokens + 2 * 5 + 3])
    assert torch.equal(pos_embed_from_table(table, prefix=prefix), pe)
    grown = pos_embed_from_table(table, (12, 10), prefix=prefix)
    ref = F.interpolate(pe[0, prefix_tokens:].reshape(6, 5, 16).permute(2, 0, 1)[None], size=(12, 10),
                        mode="bicubic", antialias=True)[0].permute(1, 2, 0).reshape(1, 120, 16)
    assert torch.equal(grown[:, prefix_tokens:], ref)


def test_encoding_in_pos_embed_layout():
    enc = create_encoding("lff", in_dim=2, num_features=16)
    pe = pos_embed_from_encoding(enc, (3, 4), num_prefix_tokens=1)
    assert pe.shape == (1, 13, 16) and bool((pe[0, 0] == 0).all())
    pos = patch_positions(3, 4, "continuous")
    torch.testing.assert_close(pe[0, 1:], enc(pos))
    gauss = create_encoding("gaussian", in_dim=2, num_features=16, sigma=0.1)
    pe2 = pos_embed_from_encoding(gauss, 4)  # positions in the encoding's own domain [0, 1)
    torch.testing.assert_close(pe2[0], gauss(patch_positions(4, 4, "continuous", domain=(0.0, 1.0))))


class TimmLikeViT(nn.Module):
    """The two attributes of timm's VisionTransformer the helpers rely on."""

    def __init__(self, grid=(4, 4), prefix=1, dim=16):
        super().__init__()
        self.patch_embed = nn.Module()
        self.patch_embed.grid_size = grid
        self.pos_embed = nn.Parameter(torch.randn(1, prefix + grid[0] * grid[1], dim))


def test_replace_pos_embed_and_back():
    model = TimmLikeViT()
    before = model.pos_embed.detach().clone()
    enc = create_encoding("sinusoidal", in_dim=2, num_features=16)
    old = replace_pos_embed(model, enc, positions="index")
    assert torch.equal(old, before)
    assert torch.equal(model.pos_embed[0, 0], before[0, 0])  # the CLS row keeps its value
    torch.testing.assert_close(model.pos_embed[0, 1:], enc(patch_positions(4, 4, "index")).float())
    with torch.no_grad():
        model.pos_embed.copy_(old)
    assert torch.equal(model.pos_embed, before)


def test_bad_input():
    with pytest.raises(ValueError, match="pos_embed"):
        learned_table_from_pos_embed(torch.randn(1, 10, 4), (3, 3), 0)
    with pytest.raises(TypeError, match="grid_size"):
        learned_table_from_pos_embed(torch.randn(1, 10, 4), "3x3", 1)
    with pytest.raises(ValueError, match="in_dim"):
        pos_embed_from_encoding(create_encoding("gaussian"), 3)
    with pytest.raises(TypeError, match="timm"):
        replace_pos_embed(nn.Linear(2, 2), create_encoding("sinusoidal", in_dim=2, num_features=4))
    with pytest.raises(ValueError, match="out_dim"):
        replace_pos_embed(TimmLikeViT(dim=8), create_encoding("sinusoidal", in_dim=2, num_features=16))
    with pytest.raises(TypeError, match="table"):
        pos_embed_from_table(create_encoding("sinusoidal", in_dim=2, num_features=4))
