import pytest
import torch
from torch import nn

from posenc.search import (
    AddEncoding,
    EncodingSearch,
    MixedOp,
    Zero,
    apply_selection,
    magnitude_select,
    mixed_ops,
    perturbation_select,
    train_darts,
)
from posenc.search.encoding import EncodingBranch, grid_positions


class TinyViT(nn.Module):
    """A user's ViT: patches + class token + additive position embedding + encoder."""

    def __init__(self, dim=16, grid=(4, 4)):
        super().__init__()
        self.patch = nn.Conv2d(1, dim, 2, stride=2)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Identity()  # the user's position layer: replaced below
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(dim, 2, 32, 0.0, batch_first=True), 1,
                                             enable_nested_tensor=False)
        self.head = nn.Linear(dim, 4)

    def forward(self, images):
        x = self.patch(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], 1)
        return self.head(self.encoder(self.pos(x))[:, 0])


def _task(n=96, seed=0):
    # the label is where the one bright patch is: only position information can tell
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    x = torch.rand(n, 1, 8, 8, generator=g) * 0.1
    for i, q in enumerate(y.tolist()):
        r, c = divmod(q, 2)
        x[i, 0, 4 * r:4 * r + 2, 4 * c:4 * c + 2] += 1.0
    return x, y


def test_grid_positions_raster_order():
    index, centre = grid_positions((2, 3))
    assert index.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    torch.testing.assert_close(centre[0], torch.tensor([-0.5, -2 / 3]))


def test_encoding_search_adds_the_mixture_and_none_adds_nothing():
    torch.manual_seed(0)
    enc = EncodingSearch(16, (4, 4), prefix_tokens=1, alpha_init="zeros")
    assert enc.names == ("none", "sinusoidal", "learned_table", "lff") and isinstance(enc, MixedOp)
    x = torch.randn(3, 17, 16)
    branches = [enc.ops[n] for n in enc.names[1:]]
    ref = x + sum(0.25 * b(x) for b in branches)
    torch.testing.assert_close(enc(x), ref)
    for b in branches:
        assert isinstance(b, EncodingBranch)
        out = b(x)
        assert torch.equal(out[:, 0], torch.zeros_like(out[:, 0]))  # the class token gets no encoding
        rms = out[:, 1:].pow(2).mean(-1).sqrt()
        torch.testing.assert_close(rms, torch.ones_like(rms), atol=1e-4, rtol=0)
    enc.discretize("none")
    assert torch.equal(enc(x), x)
    assert isinstance(enc.selected_module(), nn.Identity)
    enc.discretize("sinusoidal")
    plain = enc.selected_module()
    assert isinstance(plain, AddEncoding)
    torch.testing.assert_close(plain(x), enc(x))
    seq = EncodingSearch(8, 5, candidates=("none", "sinusoidal"))
    assert seq(torch.zeros(2, 5, 8)).shape == (2, 5, 8)
    custom = EncodingSearch(8, 5, candidates={"none": Zero(), "mine": nn.Linear(8, 8)})
    assert custom.names == ("none", "mine")


def test_encoding_search_on_a_users_vit_finds_an_encoding_and_applies_it():
    torch.manual_seed(0)
    model = TinyViT()
    model.pos = EncodingSearch(16, (4, 4), candidates=("none", "sinusoidal", "learned_table"), prefix_tokens=1)
    train, val = _task(128, 0), _task(128, 1)
    train_darts(model, train, val, epochs=6, batch_size=32, optimizer="adamw", lr=3e-3, lr_min=0.0,
                a_lr=3e-2)
    assert list(mixed_ops(model)) == ["pos"]
    mag = magnitude_select(model, apply=False).choices["pos"]
    sel = perturbation_select(model, val, criterion="loss")
    assert sel.choices["pos"] != "none" and mag != "none"  # position is all this task is about
    plain = apply_selection(model)
    assert isinstance(plain.pos, AddEncoding)
    model.eval()
    plain.eval()
    x = _task(8, 2)[0]
    torch.testing.assert_close(plain(x), model(x))


def test_bad_input():
    with pytest.raises(ValueError, match="grid"):
        EncodingSearch(16, (2, 2, 2))
    with pytest.raises(ValueError, match="candidates"):
        EncodingSearch(16, 4, candidates=("none", "nope"))
    with pytest.raises(ValueError, match="encoding_kwargs"):
        EncodingSearch(16, 4, candidates=("none", "sinusoidal"), encoding_kwargs={"lff": {}})
    enc = EncodingSearch(16, (2, 2))
    with pytest.raises(ValueError, match="x must have shape"):
        enc(torch.zeros(2, 4, 8))
    with pytest.raises(ValueError, match="tokens"):
        enc(torch.zeros(2, 5, 16))
    with pytest.raises(ValueError, match="candidates"):
        EncodingSearch(16, 4, candidates="sinusoidal")
