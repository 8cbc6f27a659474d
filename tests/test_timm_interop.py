"""The same numbers as timm itself, where timm is installed (skipped elsewhere).

timm needs torchvision, which has no CPU build for every torch pinned here, so
these run where timm is present (e.g. a GPU machine's image); ``tests/test_interop.py``
checks the same helpers against timm's documented layout everywhere.
"""

import math

import pytest
import torch

timm = pytest.importorskip("timm")
from timm.layers import resample_abs_pos_embed  # noqa: E402
from timm.layers.pos_embed_sincos import apply_rot_embed, build_rotary_pos_embed  # noqa: E402

from posenc.attention.rotary import rotate  # noqa: E402
from posenc.attention.rotary_nd import AxialRotaryEmbedding, nd_angles  # noqa: E402
from posenc.encodings import create_encoding  # noqa: E402
from posenc.interop import learned_table_from_pos_embed, pos_embed_from_table, replace_pos_embed  # noqa: E402
from posenc.models import patch_positions  # noqa: E402


@pytest.mark.parametrize("new", [(12, 10), (3, 4), (6, 5)])
@pytest.mark.parametrize("prefix", [0, 1])
def test_pos_embed_resampling_equals_timm(new, prefix):
    g = torch.Generator().manual_seed(0)
    pe = torch.randn(1, prefix + 6 * 5, 16, generator=g)
    table, pre = learned_table_from_pos_embed(pe, (6, 5), prefix)
    ours = pos_embed_from_table(table, new, prefix=pre)
    theirs = resample_abs_pos_embed(pe, new_size=list(new), old_size=[6, 5], num_prefix_tokens=prefix)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


def test_replace_pos_embed_in_a_timm_vit():
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=3)
    enc = create_encoding("sinusoidal", in_dim=2, num_features=32)
    cls_row = model.pos_embed[0, 0].detach().clone()
    replace_pos_embed(model, enc, positions="index")
    torch.testing.assert_close(model.pos_embed[0, 1:], enc(patch_positions(4, 4, "index")).float())
    assert torch.equal(model.pos_embed[0, 0], cls_row)
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 3) and bool(torch.isfinite(out).all())


def _timm_rope(x: torch.Tensor, feat_shape: list[int], **kwargs) -> torch.Tensor:
    sin, cos = build_rotary_pos_embed(feat_shape, dim=x.shape[-1], **kwargs)
    return apply_rot_embed(x, sin, cos)


def test_axial_rope_equals_timm_language_bands():
    # timm's in_pixels=False: bands temperature ** (-t / K) per axis, integer grid, 'ij' order
    H, W, d = 5, 7, 32
    x = torch.randn(2, 3, H * W, d, dtype=torch.float32)
    pos = patch_positions(H, W, "index").float()
    ours, _ = AxialRotaryEmbedding(d, 2, base=10000.0, layout="interleaved")(x, x, pos)
    theirs = _timm_rope(x, [H, W], in_pixels=False, temperature=10000.0)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_rope_equals_timm_default_pixel_bands():
    # timm's default: coordinates linspace(-1, 1) per axis, bands pi * 2 ** linspace(0, log2(224) - 1, K)
    H, W, d = 6, 4, 32
    K = d // 4
    x = torch.randn(1, 2, H * W, d, dtype=torch.float64)
    bands = math.pi * 2.0 ** torch.linspace(0.0, math.log2(224.0) - 1.0, K, dtype=torch.float64)
    F = torch.zeros(2 * K, 2, dtype=torch.float64)
    F[:K, 0], F[K:, 1] = bands, bands
    ys, xs = torch.linspace(-1.0, 1.0, H, dtype=torch.float64), torch.linspace(-1.0, 1.0, W, dtype=torch.float64)
    pos = torch.stack(torch.meshgrid(ys, xs, indexing="ij"), dim=-1).reshape(-1, 2)
    ours = rotate(x, nd_angles(pos, F), layout="interleaved")
    theirs = _timm_rope(x.float(), [H, W])
    # timm forms the angles (up to 112 pi rad) in float32: ~4e-5 rad of rounding at the largest
    torch.testing.assert_close(ours.float(), theirs, rtol=1e-5, atol=2e-4)
