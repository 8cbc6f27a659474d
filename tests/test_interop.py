"""timm-layout pos_embed conversions and timm-compatible (antialiased) table resampling."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from posenc.encodings import LearnedTableEncoding, create_encoding, resample_table
from posenc.interop import (
    TimmPositionEncoding,
    learned_table_from_pos_embed,
    pos_embed_from_encoding,
    pos_embed_from_table,
    remove_pos_encoding,
    replace_pos_embed,
    set_pos_encoding,
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


class DocumentedViT(nn.Module):
    """timm's ``VisionTransformer`` position step as its documentation lays it out (timm 1.0):

    patch tokens ``(B, H*W, D)`` (``(B, H, W, D)`` with ``dynamic_img_size``), class and
    register tokens in front, ``pos_embed`` of ``P + H*W`` rows added after the concatenation
    (``P = 0`` rows and added before it with ``no_embed_class``); with ``dynamic_img_size`` the
    table is resampled to the input's grid (bicubic, antialiased, the prefix rows untouched).
    Written here from that description, not from timm's code.
    """

    def __init__(self, grid=4, patch=4, dim=16, reg_tokens=0, no_embed_class=False, dynamic_img_size=False):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.patch_embed = nn.Module()
        self.patch_embed.grid_size = (grid, grid)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim, generator=g))
        self.reg_token = nn.Parameter(torch.randn(1, reg_tokens, dim, generator=g)) if reg_tokens else None
        self.num_prefix_tokens = 1 + reg_tokens
        self.no_embed_class = no_embed_class
        self.dynamic_img_size = dynamic_img_size
        rows = grid * grid + (0 if no_embed_class else self.num_prefix_tokens)
        self.pos_embed = nn.Parameter(torch.randn(1, rows, dim, generator=g))
        self.pos_drop = nn.Identity()
        self.head = nn.Linear(dim, 3)

    def _pos_embed(self, x):
        prefix = [t.expand(x.shape[0], -1, -1) for t in (self.cls_token, self.reg_token) if t is not None]
        if self.pos_embed is None:
            return torch.cat(prefix + [x.reshape(x.shape[0], -1, x.shape[-1])], dim=1)
        pe = self.pos_embed
        if self.dynamic_img_size:
            b, h, w, c = x.shape
            p = 0 if self.no_embed_class else self.num_prefix_tokens
            table = pe[0, p:].reshape(*self.patch_embed.grid_size, c).permute(2, 0, 1)[None]
            table = F.interpolate(table, size=(h, w), mode="bicubic", antialias=True, align_corners=False)
            pe = torch.cat((pe[:, :p], table[0].permute(1, 2, 0).reshape(1, h * w, c)), dim=1)
            x = x.reshape(b, h * w, c)
        if self.no_embed_class:
            return self.pos_drop(torch.cat(prefix + [x + pe], dim=1))
        return self.pos_drop(torch.cat(prefix + [x], dim=1) + pe)

    def forward(self, images):
        x = self.patch(images).permute(0, 2, 3, 1)  # (B, H, W, D)
        if not self.dynamic_img_size:
            x = x.reshape(x.shape[0], -1, x.shape[-1])
        x = self._pos_embed(x)
        return self.head(torch.tanh(x).mean(dim=1)), x


@pytest.mark.parametrize("no_embed_class", [False, True])
@pytest.mark.parametrize("reg_tokens", [0, 2])
@pytest.mark.parametrize("dynamic", [False, True])
def test_set_pos_encoding_with_the_table_reproduces_the_model(no_embed_class, reg_tokens, dynamic):
    model = DocumentedViT(reg_tokens=reg_tokens, no_embed_class=no_embed_class, dynamic_img_size=dynamic)
    sizes = [16, 24, 12] if dynamic else [16]
    images = [torch.randn(2, 3, s, s, generator=torch.Generator().manual_seed(s)) for s in sizes]
    before = [model(im)[1] for im in images]
    p = 0 if no_embed_class else model.num_prefix_tokens
    table, _ = learned_table_from_pos_embed(model.pos_embed, 4, p)
    hook = set_pos_encoding(model, table)
    assert model.pos_embed is None and model.posenc_pos_embed is hook
    assert (hook.prefix_pos_embed is None) == no_embed_class
    for im, ref in zip(images, before):
        torch.testing.assert_close(model(im)[1], ref)               # the same tokens, at every input size
    removed = remove_pos_encoding(model)
    assert removed is hook and isinstance(model.pos_embed, nn.Parameter) and not hasattr(model, "posenc_pos_embed")
    torch.testing.assert_close(model(images[0])[1], before[0])


def test_set_pos_encoding_trains_the_encoding():
    model = DocumentedViT(reg_tokens=1)
    lff = create_encoding("lff", in_dim=2, num_features=16, seed=0)
    set_pos_encoding(model, lff)
    names = {n for n, _ in model.named_parameters()}
    own = {f"posenc_pos_embed.encoding.{n}" for n, _ in lff.named_parameters()}
    assert own and own | {"posenc_pos_embed.prefix_pos_embed"} <= names and "pos_embed" not in names
    assert own <= set(model.state_dict())
    logits, tokens = model(torch.randn(2, 3, 16, 16))
    # the patch tokens are the patch embedding plus the encoding on the 4 x 4 grid of patch centres
    patches = model.patch(torch.zeros(1, 3, 16, 16))  # bias only: the same for every patch
    logits.sum().backward()
    grads = {n: p.grad for n, p in model.posenc_pos_embed.named_parameters()}
    assert grads and all(g is not None and bool(g.abs().sum() > 0) for g in grads.values())
    opt = torch.optim.SGD(model.posenc_pos_embed.parameters(), lr=1.0)
    before = model.posenc_pos_embed.patch_embedding(4, 4, 1, patches).detach().clone()
    opt.step()
    assert not torch.equal(model.posenc_pos_embed.patch_embedding(4, 4, 1, patches), before)


def test_set_pos_encoding_adds_the_encoding_on_the_current_grid():
    model = DocumentedViT(dynamic_img_size=True)
    sine = create_encoding("sinusoidal", in_dim=2, num_features=16)
    set_pos_encoding(model, sine, positions="index")
    im = torch.randn(1, 3, 20, 12)                                   # a 5 x 3 grid, not the 4 x 4 of pos_embed
    _, tokens = model(im)
    patches = model.patch(im).permute(0, 2, 3, 1).reshape(1, 15, 16)
    torch.testing.assert_close(tokens[:, 1:], patches + sine(patch_positions(5, 3, "index")).float())
    torch.testing.assert_close(tokens[:, :1], model.cls_token + model.posenc_pos_embed.prefix_pos_embed)
    lff = create_encoding("lff", in_dim=2, num_features=16, seed=1)
    other = DocumentedViT()
    set_pos_encoding(other, lff)                                      # continuous: patch centres in [-1, 1]
    _, tokens = other(torch.zeros(1, 3, 16, 16))
    base = other.patch(torch.zeros(1, 3, 16, 16)).permute(0, 2, 3, 1).reshape(1, 16, 16)
    torch.testing.assert_close(tokens[:, 1:], base + lff(patch_positions(4, 4, "continuous")))


def test_set_pos_encoding_augments_in_training_only():
    model = DocumentedViT(dim=16)
    cape = create_encoding("cape", in_dim=2, num_features=16, seed=0)
    set_pos_encoding(model, cape)
    im = torch.zeros(3, 3, 16, 16)                                   # three identical images
    model.train()
    a, b = model(im)[1], model(im)[1]
    assert not torch.allclose(a, b)                                  # a new draw at every step
    assert not torch.allclose(a[0], a[1])                            # one draw per image
    model.eval()
    c, d = model(im)[1], model(im)[1]
    assert torch.equal(c, d) and torch.equal(c[0], c[1])
    base = model.patch(im[:1]).permute(0, 2, 3, 1).reshape(1, 16, 16)
    torch.testing.assert_close(c[:1, 1:], base + cape.eval()(patch_positions(4, 4, "continuous")))


def test_set_pos_encoding_bad_input():
    enc = create_encoding("sinusoidal", in_dim=2, num_features=16)
    with pytest.raises(TypeError, match="timm"):
        set_pos_encoding(nn.Linear(2, 2), enc)
    with pytest.raises(ValueError, match="out_dim"):
        set_pos_encoding(DocumentedViT(dim=8), enc)
    with pytest.raises(ValueError, match="in_dim"):
        set_pos_encoding(DocumentedViT(), create_encoding("gaussian", num_features=16))
    with pytest.raises(ValueError, match="positions"):
        set_pos_encoding(DocumentedViT(), enc, positions="pixels")
    model = DocumentedViT()
    set_pos_encoding(model, enc)
    with pytest.raises(ValueError, match="already"):
        set_pos_encoding(model, enc)
    with pytest.raises(ValueError, match="pos_embed is None"):
        m = DocumentedViT()
        m.pos_embed = None
        set_pos_encoding(m, enc)
    with pytest.raises(ValueError, match="set_pos_encoding"):
        remove_pos_encoding(DocumentedViT())
    bad = DocumentedViT(reg_tokens=1)
    bad.num_prefix_tokens = 3                                         # pos_embed rows disagree with the prefix
    with pytest.raises(ValueError, match="prefix"):
        set_pos_encoding(bad, enc)
    with pytest.raises(TypeError, match="encoding"):
        TimmPositionEncoding("sine")
    with pytest.raises(ValueError, match="prefix_pos_embed"):
        TimmPositionEncoding(enc, torch.zeros(2, 16))
    assert "prefix_rows=1" in repr(model.posenc_pos_embed)


def test_set_pos_encoding_model_saves_and_loads_whole(tmp_path):
    # torch.save(model) pickles the instance's _pos_embed step: it must load back (a bound
    # method did not: AttributeError, no attribute '_timm_pos_embed') and compute the same
    import copy

    model = DocumentedViT(reg_tokens=1, dynamic_img_size=True)
    im = torch.randn(2, 3, 20, 12, generator=torch.Generator().manual_seed(0))
    plain = model(im)[1]
    set_pos_encoding(model, create_encoding("lff", in_dim=2, num_features=16, seed=0))
    ref = model(im)[1]
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    assert loaded.posenc_pos_embed is not model.posenc_pos_embed
    torch.testing.assert_close(loaded(im)[1], ref, rtol=0, atol=0)
    # the loaded step uses the loaded model's own encoding, not the original's
    with torch.no_grad():
        next(loaded.posenc_pos_embed.encoding.parameters()).add_(1.0)
    assert not torch.allclose(loaded(im)[1], ref) and torch.equal(model(im)[1], ref)
    twin = copy.deepcopy(model)
    torch.testing.assert_close(twin(im)[1], ref, rtol=0, atol=0)
    assert twin._pos_embed.args[0] is twin                          # bound to the copy
    remove_pos_encoding(loaded)                                     # and undoable after loading
    assert isinstance(loaded.pos_embed, nn.Parameter) and "_pos_embed" not in loaded.__dict__
    torch.testing.assert_close(loaded(im)[1], plain)


def test_timm_guide_names_matching_torch_torchvision_pairs():
    # docs/timm.md tells users which torch / torchvision pairs load together. torchvision 0.N
    # is built for torch 2.(N - 15) (0.15 for 2.0, ..., 0.24 for 2.9, 0.29 for 2.14): every
    # pair the guide names must follow that rule, and the guide says how to get CPU builds.
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "timm.md").read_text(encoding="utf-8")
    pairs = re.findall(r"torch[= ]=?(2\.(\d+)\.\d+)\s*(?:\+\s*)?torchvision[= ]=?(0\.(\d+)\.\d+)", text)
    assert len(pairs) >= 3, pairs
    for torch_version, torch_minor, vision_version, vision_minor in pairs:
        assert int(vision_minor) == int(torch_minor) + 15, f"torch {torch_version} with torchvision {vision_version}"
    assert "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu" in text
    assert "import timm" in text and "torchvision::nms" in text
