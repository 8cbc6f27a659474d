"""Every registered encoding round-trips through a state_dict; recomputable buffers are not saved."""

import pytest
import torch

from posenc.encodings import available_encodings, create_encoding, encoding_parameters

# constructor arguments that make a non-default, seed-dependent instance of each encoding
ARGS = {"learned_table": {"grid_size": 8}, "cape": {"num_features": 16}, "lff": {"num_features": 16},
        "coord_mlp": {"num_features": 16}}


def _build(name: str, **extra):
    kw = dict(ARGS.get(name, {}))
    params = encoding_parameters(name)
    if "num_features" in params and "num_features" not in kw:
        kw["num_features"] = 16
    if "seed" in params:
        kw["seed"] = 3
    kw.update(extra)
    return create_encoding(name, **kw)


def _positions(enc):
    if getattr(enc, "positions_kind", None) == "index" or type(enc).__name__ == "LearnedTableEncoding":
        return torch.randint(0, 8, (5, enc.in_dim))
    return torch.rand(5, enc.in_dim) * 0.9


@pytest.mark.parametrize("name", available_encodings())
def test_state_dict_round_trip(name):
    enc = _build(name).eval()
    with torch.no_grad():
        for p in enc.parameters():  # a "trained" state different from the initial one
            p.add_(0.1 * torch.randn_like(p))
    sd = enc.state_dict()
    assert set(sd) == {k for k, _ in enc.named_parameters()} | {
        k for k, _ in enc.named_buffers() if k.rsplit(".", 1)[-1] not in enc._non_persistent_buffers_set
    }
    fresh = _build(name).eval()
    fresh.load_state_dict(sd)  # strict
    pos = _positions(enc)
    torch.testing.assert_close(fresh(pos), enc(pos))


@pytest.mark.parametrize("name", ["gaussian", "rff", "linf", "random", "lff"])
def test_recomputable_buffers_are_not_saved_and_old_checkpoints_load(name):
    enc = _build(name, **({"learnable_freqs": False} if name == "lff" else {}))
    saved = {k for k, _ in enc.named_buffers() if k in enc._non_persistent_buffers_set}
    assert saved and not saved & set(enc.state_dict())
    # a checkpoint written when these buffers were persistent still loads strictly ...
    legacy = {**enc.state_dict(), **dict(enc.named_buffers())}
    _build(name, **({"learnable_freqs": False} if name == "lff" else {})).load_state_dict(legacy)
    # ... unless its buffers disagree with the constructor arguments (another seed, say)
    if "seed" in encoding_parameters(name):
        other = _build(name, seed=7, **({"learnable_freqs": False} if name == "lff" else {}))
        with pytest.raises(RuntimeError, match="constructor arguments"):
            other.load_state_dict(legacy)
