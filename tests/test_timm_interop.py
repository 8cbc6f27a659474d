"""The same numbers as timm itself, where timm is installed (skipped elsewhere).

timm's ``VisionTransformer`` and position-embedding helpers are plain PyTorch, but
``import timm`` imports torchvision, and PyPI has no torchvision that loads beside
the CPU build of torch pinned here (its wheel is built against CUDA torch). ``make
install`` therefore installs timm without its dependencies; when torchvision cannot be
imported, these tests import timm with an empty stand-in for torchvision, used only
while timm is imported and removed from ``sys.modules`` afterwards (timm's transforms
and data loaders, which need the real one, are never called here). Where timm is
absent the module is skipped; ``tests/test_interop.py`` checks the same helpers
against timm's documented layout everywhere.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import math
import sys
import types

import pytest
import torch
from torch import nn


def _import_timm_without_torchvision():
    """``import timm`` with a placeholder torchvision whose every attribute is an inert class."""

    class _Meta(type):
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Meta(name, (_Inert,), {})

        def __iter__(cls):
            return iter(())

    class _Inert(metaclass=_Meta):
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, *args, **kwargs):
            raise RuntimeError("torchvision is a stand-in in this test run")

    class _Module(types.ModuleType):
        __path__: list = []

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Meta(name, (_Inert,), {})

    class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path=None, target=None):
            if name == "torchvision" or name.startswith("torchvision."):
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            return _Module(spec.name)

        def exec_module(self, module):
            module.__version__ = "0+stand-in"

    def forget(prefix):
        for name in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
            del sys.modules[name]

    forget("timm")
    forget("torchvision")
    finder = _Finder()
    sys.meta_path.insert(0, finder)
    try:
        import timm
    finally:
        sys.meta_path.remove(finder)
        forget("torchvision")
    return timm


if importlib.util.find_spec("timm") is None:
    pytest.skip("timm is not installed (make install adds it without dependencies)", allow_module_level=True)
try:
    import timm

    _TIMM_IMPORT_ERROR = None
except (ImportError, RuntimeError, OSError) as exc:  # torchvision missing, or a build that cannot load here
    _TIMM_IMPORT_ERROR = exc
    timm = _import_timm_without_torchvision()

from timm.layers import resample_abs_pos_embed  # noqa: E402
from timm.layers.pos_embed_sincos import apply_rot_embed, build_rotary_pos_embed  # noqa: E402

from posenc.attention.relative.rotary import rotate  # noqa: E402
from posenc.attention.relative.rotary_nd import AxialRotaryEmbedding, nd_angles  # noqa: E402
from posenc.encodings import create_encoding  # noqa: E402
from posenc.interop import (  # noqa: E402
    learned_table_from_pos_embed,
    pos_embed_from_table,
    remove_pos_encoding,
    replace_pos_embed,
    set_pos_encoding,
)
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


def _vit(**kwargs):
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=3, **kwargs)
    with torch.no_grad():  # timm starts pos_embed near zero; a random table makes the comparison bite
        model.pos_embed.normal_()
    return model.eval()


@pytest.mark.parametrize("kwargs", [{}, {"reg_tokens": 2}, {"no_embed_class": True, "reg_tokens": 1},
                                    {"dynamic_img_size": True}, {"dynamic_img_size": True, "no_embed_class": True},
                                    {"class_token": False, "global_pool": "avg"}])
def test_set_pos_encoding_with_the_table_equals_timm(kwargs):
    # timm's own pos_embed as a posenc table (resampled as timm resamples it): the same model outputs
    model = _vit(**kwargs)
    sizes = [32, 48, 24] if kwargs.get("dynamic_img_size") else [32]
    images = [torch.randn(2, 3, s, s + 8 * (s != 32), generator=torch.Generator().manual_seed(s)) for s in sizes]
    with torch.no_grad():
        before = [model.forward_features(im) for im in images]
    prefix = 0 if model.no_embed_class else model.num_prefix_tokens
    table, _ = learned_table_from_pos_embed(model.pos_embed, model.patch_embed.grid_size, prefix)
    set_pos_encoding(model, table)
    with torch.no_grad():
        for im, ref in zip(images, before):
            torch.testing.assert_close(model.forward_features(im), ref, rtol=1e-5, atol=1e-5)
    remove_pos_encoding(model)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_features(images[0]), before[0])


def test_lff_trains_inside_timm():
    model = _vit(dynamic_img_size=True).train()
    set_pos_encoding(model, create_encoding("lff", in_dim=2, num_features=32, seed=0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(4, 3, 32, 40), torch.tensor([0, 1, 2, 0])
    losses = []
    for _ in range(2):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        enc_grads = [p.grad for p in model.posenc_pos_embed.encoding.parameters()]
        assert enc_grads and all(g is not None and bool(g.abs().sum() > 0) for g in enc_grads)
        assert model.posenc_pos_embed.prefix_pos_embed.grad is not None
        opt.step()
        losses.append(loss.item())
    assert losses[1] != losses[0]


def test_cape_augments_inside_timm_in_training_only():
    model = _vit()
    set_pos_encoding(model, create_encoding("cape", in_dim=2, num_features=32, seed=0))
    x = torch.randn(2, 3, 32, 32)
    model.train()
    with torch.no_grad():
        a, b = model.forward_features(x), model.forward_features(x)
    assert not torch.allclose(a, b)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model.forward_features(x), model.forward_features(x))


def test_timm_model_with_a_posenc_encoding_saves_and_loads_whole(tmp_path):
    # torch.save(model) / torch.load of a whole timm ViT after set_pos_encoding (the usual
    # timm checkpoint workflow); then its state dict into a fresh model given the same encoding
    model = _vit(dynamic_img_size=True)
    set_pos_encoding(model, create_encoding("lff", in_dim=2, num_features=32, seed=0))
    x = torch.randn(2, 3, 32, 40, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model.forward_features(x)
    torch.save(model, tmp_path / "vit.pt")
    loaded = torch.load(tmp_path / "vit.pt", weights_only=False).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded.forward_features(x), ref, rtol=0, atol=0)
    fresh = _vit(dynamic_img_size=True)
    set_pos_encoding(fresh, create_encoding("lff", in_dim=2, num_features=32, seed=5))
    fresh.load_state_dict(loaded.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(fresh.forward_features(x), ref, rtol=0, atol=0)


def test_import_timm_needs_a_torchvision_that_loads():
    # docs/timm.md: `import timm` imports torchvision. Where it failed here, the error names
    # torchvision (missing, or built for another torch: "operator torchvision::nms does not
    # exist"); where it worked, torchvision was imported with it.
    if _TIMM_IMPORT_ERROR is None:
        assert "torchvision" in sys.modules
    else:
        assert "torchvision" in str(_TIMM_IMPORT_ERROR), _TIMM_IMPORT_ERROR
