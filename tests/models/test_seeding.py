"""Paired initialisation: ``init_seed`` fixes the transformer's weights whatever the encoding."""

import pytest
import torch
from torch import nn

from posenc.encodings import (
    CoordinateMLPEncoding,
    LearnableFourierEncoding,
    LearnedTableEncoding,
    SinusoidalEncoding,
)
from posenc.models import TinyViT, TransformerEncoder, seeded_reset_parameters


def _encodings(dim: int = 16):
    """One of each kind: none, parameter-free, a table, MLPs (each consumes a different amount of RNG)."""
    return [
        None,
        SinusoidalEncoding(in_dim=2, num_features=dim),
        LearnedTableEncoding(in_dim=2, grid_size=4, num_features=dim, seed=3),
        CoordinateMLPEncoding(in_dim=2, num_features=dim, hidden_dim=8, seed=4),
        LearnableFourierEncoding(in_dim=2, num_features=dim, hidden_dim=8, seed=5),
        LearnableFourierEncoding(in_dim=2, num_features=dim, hidden_dim=8, seed=5, use_mlp=False),
    ]


def _trunk(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters() if "encoding" not in k.split(".")}


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_same_init_seed_same_transformer_whatever_the_encoding_and_the_global_rng():
    trunks = []
    for i, enc in enumerate(_encodings()):
        torch.manual_seed(1000 + i)  # a different global RNG state before each build
        torch.randn(17 * i)
        trunks.append(_trunk(TransformerEncoder(2, 1, dim=16, depth=2, num_heads=2, encoding=enc, init_seed=7)))
    for t in trunks[1:]:
        _assert_same(trunks[0], t)
    assert len(trunks[0]) == 2 + 2 * 12 + 2 + 2  # embed, 2 blocks x (2 LNs, qkv, proj, 2 MLP linears), norm, head


def test_init_seed_equals_a_model_without_encoding_built_right_after_manual_seed():
    """Independent reference: PyTorch's own construction-order draws after ``torch.manual_seed``."""
    torch.manual_seed(11)
    ref = TransformerEncoder(2, 1, dim=16, depth=2, num_heads=2)
    torch.manual_seed(0)
    enc = LearnableFourierEncoding(in_dim=2, num_features=16, hidden_dim=8, seed=2)
    _assert_same(_trunk(ref), _trunk(TransformerEncoder(2, 1, dim=16, depth=2, num_heads=2, encoding=enc,
                                                        init_seed=11)))
    torch.manual_seed(11)
    vit_ref = TinyViT(1, 10, patch_size=4, dim=16, num_heads=2)
    vit = TinyViT(1, 10, patch_size=4, dim=16, num_heads=2, encoding=LearnedTableEncoding(
        in_dim=2, grid_size=4, num_features=16, seed=1), init_seed=11)
    _assert_same(_trunk(vit_ref), _trunk(vit))


def test_tinyvit_paired_across_encodings_and_different_across_seeds():
    def vit(enc, seed):
        kind = "continuous" if isinstance(enc, (LearnableFourierEncoding, CoordinateMLPEncoding)) else "index"
        return TinyViT(1, 10, patch_size=4, dim=16, num_heads=2, encoding=enc, positions=kind, init_seed=seed)

    encs = _encodings()
    base = _trunk(vit(encs[0], 3))
    assert "patch_embed.weight" in base and "cls" in base
    for enc in encs[1:]:
        _assert_same(base, _trunk(vit(enc, 3)))
    other = _trunk(vit(encs[0], 4))
    differ = [k for k in base if not torch.equal(base[k], other[k])]
    # every randomly drawn tensor differs; LayerNorm (ones / zeros) and the CLS token (its own seed) do not
    assert "patch_embed.weight" in differ and "encoder.head.weight" in differ and "encoder.embed.bias" in differ
    assert "cls" not in differ and not any(k.endswith(("norm1.weight", "norm.bias")) for k in differ)


def test_different_init_seeds_give_different_transformers():
    a = _trunk(TransformerEncoder(2, 1, dim=16, num_heads=2, init_seed=0))
    b = _trunk(TransformerEncoder(2, 1, dim=16, num_heads=2, init_seed=1))
    assert not torch.equal(a["embed.weight"], b["embed.weight"])
    assert not torch.equal(a["blocks.1.attn.qkv.weight"], b["blocks.1.attn.qkv.weight"])


def test_the_encoding_keeps_its_own_parameters():
    enc = LearnableFourierEncoding(in_dim=2, num_features=16, hidden_dim=8, seed=9)
    want = {k: v.clone() for k, v in enc.state_dict().items()}
    model = TransformerEncoder(2, 1, dim=16, num_heads=2, encoding=enc, init_seed=1)
    for k, v in model.encoding.state_dict().items():
        assert torch.equal(v, want[k])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    model.reset_parameters()  # redraws the trunk from init_seed; the encoding stays as it is
    _assert_same(_trunk(model), _trunk(TransformerEncoder(2, 1, dim=16, num_heads=2, init_seed=1)))
    assert torch.equal(model.encoding.w_r, want["w_r"] + 1.0)


def test_seeded_reset_restores_the_global_rng_and_is_deterministic():
    model = TransformerEncoder(2, 1, dim=16, num_heads=2)
    torch.manual_seed(5)
    state = torch.get_rng_state()
    names = seeded_reset_parameters(model, 3)
    assert torch.equal(torch.get_rng_state(), state)
    first = _trunk(model)
    seeded_reset_parameters(model, 3)
    _assert_same(first, _trunk(model))
    assert names[0] == "embed" and names[-1] == "head" and "blocks.0.attn.qkv" in names


def test_unseeded_models_still_follow_the_global_rng():
    """``init_seed=None`` keeps PyTorch's default: construction-order draws from the global RNG."""
    torch.manual_seed(2)
    a = _trunk(TransformerEncoder(2, 1, dim=16, num_heads=2))
    torch.manual_seed(2)
    b = _trunk(TransformerEncoder(2, 1, dim=16, num_heads=2))
    torch.manual_seed(2)
    c = _trunk(TransformerEncoder(2, 1, dim=16, num_heads=2, encoding=CoordinateMLPEncoding(
        in_dim=2, num_features=16, hidden_dim=8)))
    _assert_same(a, b)
    assert not torch.equal(a["head.weight"], c["head.weight"])  # the encoding consumed draws first: unpaired


def test_custom_attention_with_reset_parameters_is_seeded_too():
    class Attn(nn.Module):
        def __init__(self, dim: int, heads: int) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.empty(dim))
            self.reset_parameters()

        def reset_parameters(self) -> None:
            nn.init.normal_(self.scale)

        def forward(self, x, positions=None):
            return x * self.scale

    a = TransformerEncoder(2, 1, dim=8, num_heads=2, attention=Attn, init_seed=4)
    b = TransformerEncoder(2, 1, dim=8, num_heads=2, attention=Attn, init_seed=4,
                           encoding=SinusoidalEncoding(in_dim=2, num_features=8))
    _assert_same(_trunk(a), _trunk(b))


def test_bad_inputs():
    class NoReset(nn.Module):
        def __init__(self, dim: int, heads: int) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(dim))

        def forward(self, x, positions=None):
            return x * self.w

    with pytest.raises(TypeError, match="attn.*NoReset.*reset_parameters"):
        TransformerEncoder(2, 1, dim=8, num_heads=2, attention=NoReset, init_seed=0)
    TransformerEncoder(2, 1, dim=8, num_heads=2, attention=NoReset)  # fine without init_seed
    with pytest.raises(ValueError, match="init_seed"):
        TransformerEncoder(2, 1, dim=8, num_heads=2, init_seed=-1)
    for bad in (1.5, True, "3"):
        with pytest.raises(TypeError, match="init_seed"):
            TransformerEncoder(2, 1, dim=8, num_heads=2, init_seed=bad)
        with pytest.raises(TypeError, match="init_seed"):
            TinyViT(1, 10, dim=8, num_heads=2, init_seed=bad)
    with pytest.raises(ValueError, match="init_seed"):
        TinyViT(1, 10, dim=8, num_heads=2, init_seed=-2)
    with pytest.raises(TypeError, match="module"):
        seeded_reset_parameters(torch.zeros(3), 0)
    with pytest.raises(ValueError, match="seed"):
        seeded_reset_parameters(nn.Linear(2, 2), -1)
    with pytest.raises(TypeError, match="seed"):
        seeded_reset_parameters(nn.Linear(2, 2), 0.5)


def test_extra_repr_names_the_seeds():
    assert "init_seed=3" in repr(TransformerEncoder(2, 1, dim=8, num_heads=2, init_seed=3))
    assert "init_seed" not in repr(TransformerEncoder(2, 1, dim=8, num_heads=2))
    assert "seed=0, init_seed=2" in repr(TinyViT(1, 10, dim=8, num_heads=2, init_seed=2))
