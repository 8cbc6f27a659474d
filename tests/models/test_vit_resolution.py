"""TinyViT runs at any image size with each position variant of the cape section."""

import pytest
import torch

from posenc.encodings import CAPEEncoding, LearnedTableEncoding, SinusoidalEncoding
from posenc.encodings.learnable import resample_table
from posenc.models import TinyViT


def _variants():
    return {
        "cape": (CAPEEncoding(in_dim=2, num_features=16), "continuous"),
        "table": (LearnedTableEncoding(in_dim=2, grid_size=4, num_features=16, interpolation="bicubic"), "index"),
        "sin2d": (SinusoidalEncoding(in_dim=2, num_features=16), "index"),
        "none": (None, "index"),
    }


@pytest.mark.parametrize("name", ["cape", "table", "sin2d", "none"])
def test_any_size_train_and_eval(name):
    enc, kind = _variants()[name]
    torch.manual_seed(0)
    vit = TinyViT(num_classes=4, patch_size=4, dim=16, num_heads=2, encoding=enc, positions=kind)
    for h, w in ((4, 4), (8, 8), (16, 16), (24, 12), (4, 40)):
        x = torch.rand(2, 1, h, w)
        vit.train()
        assert vit(x).shape == (2, 4)
        vit.eval()
        out = vit(x)
        assert out.shape == (2, 4) and bool(torch.isfinite(out).all())


def test_table_is_resampled_to_the_test_grid():
    tab = LearnedTableEncoding(in_dim=2, grid_size=4, num_features=16, interpolation="bicubic")
    vit = TinyViT(num_classes=4, patch_size=4, dim=16, num_heads=2, encoding=tab).eval()
    seen = []
    vit.encoder.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    x = torch.zeros(1, 1, 24, 24)  # 6 x 6 patches from a 4 x 4 table
    vit(x)
    want_pos = resample_table(tab.weight, (6, 6), "bicubic").reshape(36, 16)
    patch = vit.encoder.embed(vit.patch_embed(x).flatten(2).transpose(1, 2))
    torch.testing.assert_close(seen[0][0, 1:], (patch + want_pos)[0])
