"""Arguments every encoding shares are validated, not coerced (#10 §2, §4)."""

import pytest
import torch

from posenc.encodings import available_encodings, create_encoding, encoding_parameters

NAMES = available_encodings()


@pytest.mark.parametrize("name", NAMES)
def test_device_dtype_and_meta_are_refused_naming_the_argument(name):
    with pytest.raises(ValueError, match="device must be a torch device"):
        create_encoding(name, in_dim=1, device="bogus")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda' is not available"):
            create_encoding(name, in_dim=1, device="cuda")
    with pytest.raises(TypeError, match="dtype must be a floating-point"):
        create_encoding(name, in_dim=1, dtype=torch.int32)
    enc = create_encoding(name, in_dim=1)
    with pytest.raises(ValueError, match="positions is on the 'meta' device"):
        enc(torch.zeros(4, 1, device="meta"))


@pytest.mark.parametrize("name", NAMES)
def test_bools_and_seed_are_not_coerced(name):
    params = encoding_parameters(name)
    for flag, default in params.items():
        if isinstance(default, bool):
            with pytest.raises(TypeError, match=f"{flag} must be True or False"):
                create_encoding(name, in_dim=1, **{flag: "maybe"})
    if "seed" in params:
        with pytest.raises(ValueError, match="seed must be >= 0"):
            create_encoding(name, in_dim=1, seed=-1)


@pytest.mark.parametrize("value", [1e308, 1e-300])
@pytest.mark.parametrize("name,arg", [("gaussian", "sigma"), ("rff", "sigma"), ("rff", "kernel_width"),
                                      ("lff", "gamma"), ("triangle", "width"), ("impulse", "sigma")])
def test_extreme_widths_fail_at_construction(name, arg, value):
    kwargs = {arg: value}
    if name == "impulse":
        kwargs["generator"] = "gaussian"
        name = "circulant"
    with pytest.raises(ValueError, match=f"{arg} must be in"):
        create_encoding(name, in_dim=1, **kwargs)


def test_widths_at_the_edge_of_the_range_give_finite_features():
    for dtype in (torch.float32, torch.float64):
        x = torch.rand(16, 1, generator=torch.Generator().manual_seed(0), dtype=dtype)
        x[0, 0] = 0.5  # exactly on a Gaussian centre: 0 * (1 / sigma^2) must not be 0 * inf
        for name, arg in (("gaussian", "sigma"), ("rff", "sigma"), ("triangle", "width"), ("linf", "max_freq")):
            for value in (1e-15, 1e15):
                if arg == "max_freq" and value < 1:
                    continue
                try:
                    enc = create_encoding(name, in_dim=1, **{arg: value}, normalize=True, dtype=torch.float64)
                except ValueError as err:  # e.g. no grid point near any centre: row scale undefined
                    assert "non-finite 'scale'" in str(err), str(err)
                    continue
                feats = enc(x)  # float32 positions with float64 buffers too
                assert torch.isfinite(feats).all(), (name, value, dtype)


def test_product_mode_out_dim_is_bounded():
    with pytest.raises(ValueError, match=r"mode='product' gives num_features \*\* in_dim = 64\*\*8"):
        create_encoding("gaussian", in_dim=8, num_features=64, mode="product")
    assert create_encoding("gaussian", in_dim=2, num_features=64, mode="product").out_dim == 64**2


def test_signature_is_kept_for_introspection():
    import inspect

    from posenc.encodings.basis import GaussianEncoding

    assert "sigma" in inspect.signature(GaussianEncoding).parameters
