"""The attention modules' paths from before the two families had subpackages still work.

``posenc.attention.rotary`` is now ``posenc.attention.relative.rotary``, and so on: the old
dotted names import as the same module objects, the names that moved between files are
still found under their old modules, and a model pickled while its classes lived under the
old paths loads.
"""

from __future__ import annotations

import importlib
import io
import pickle
import subprocess
import sys

import pytest
import torch

import posenc.attention as A

FORMER = {
    "decay": "kernelized.decay",
    "features": "kernelized.features",
    "layers": "kernelized.layers",
    "reference": "kernelized.reference",
    "rpe2d": "kernelized.rpe2d",
    "toeplitz": "kernelized.toeplitz",
    "alibi": "relative.alibi",
    "relative_attention": "relative.relative_attention",
    "relative_bias": "relative.relative_bias",
    "rope_hf": "relative.rope_hf",
    "rope_scaling": "relative.rope_scaling",
    "rotary": "relative.rotary",
    "rotary_kernels": "relative.rotary_kernels",
    "rotary_nd": "relative.rotary_nd",
    "xpos": "relative.xpos",
}

# posenc.attention.__all__ before the split: every name is still exported
PUBLIC = {
    "AxialRotaryEmbedding", "DecayDecoder", "KernelizedAttention", "KernelizedAttentionLayer", "KernelizedMHA",
    "MixedRotaryEmbedding", "PositiveRandomFeatures", "RelativeMHA", "RelativePositionBias", "RelativeSelfAttention",
    "RopeScaling", "RotaryEmbedding", "TrigRandomFeatures", "alibi_bias", "alibi_decay_terms", "alibi_decoder",
    "alibi_kernelized_attention", "alibi_score_mod", "alibi_slopes", "apply_rope", "apply_rope_qk",
    "axial_frequencies", "bias_score_mod", "clipped_buckets", "convert_rope_layout", "decay_coeffs",
    "decay_kernelized_attention", "decay_toeplitz", "dense_kernelized_attention", "kernel_estimate",
    "kernelized_attention", "kernelized_attention_2d", "layout_permutation", "linear_position_scale",
    "mixed_frequencies", "ntk_base", "relative_attention_factory", "rope_frequencies", "rope_from_hf_config",
    "rpe2d_matrix", "rpe_coeffs", "rpe_matrix", "set_rope_scaling", "softmax_rpe_attention", "t5_buckets",
    "toeplitz2d_matmul", "toeplitz_dense", "toeplitz_matmul", "yarn_frequencies",
}


def test_the_package_exports_every_former_name():
    assert set(A.__all__) == PUBLIC and len(A.__all__) == len(PUBLIC)
    from posenc.attention import kernelized, relative

    for name in PUBLIC:
        family = kernelized if name in kernelized.__all__ else relative
        assert getattr(A, name) is getattr(family, name), name


@pytest.mark.parametrize("old", sorted(FORMER))
def test_a_former_module_path_is_the_new_module(old):
    new = importlib.import_module(f"posenc.attention.{FORMER[old]}")
    assert importlib.import_module(f"posenc.attention.{old}") is new
    assert getattr(A, old) is new
    assert sys.modules[f"posenc.attention.{old}"] is new
    exec(f"import posenc.attention.{old} as m; from posenc.attention import {old} as n", ns := {})
    assert ns["m"] is new and ns["n"] is new


def test_names_that_moved_between_files_are_found_under_their_former_modules():
    from posenc.attention.alibi import alibi_slopes
    from posenc.attention.kernelized import (
        check_all_finite, check_key_padding_mask, check_qkv, kernelized_attention, ratio_of_last, safe_ratio,
    )
    from posenc.attention.kernelized import _common, kernelized as core
    from posenc.attention.mha import KernelizedMHA, RelativeMHA, canonical_key_padding_mask
    from posenc.attention.relative.frequencies import rope_frequencies as new_frequencies
    from posenc.attention.rotary import RotaryEmbedding, rope_frequencies
    from posenc.attention.slopes import alibi_slopes as new_slopes

    assert alibi_slopes is new_slopes and rope_frequencies is new_frequencies
    assert RotaryEmbedding is A.RotaryEmbedding
    assert (RelativeMHA, KernelizedMHA) == (A.RelativeMHA, A.KernelizedMHA)
    assert canonical_key_padding_mask.__module__ == "posenc.attention.mha"
    assert kernelized_attention is core.kernelized_attention
    for f in (check_all_finite, check_key_padding_mask, check_qkv, ratio_of_last, safe_ratio):
        assert f is getattr(_common, f.__name__) and f is getattr(core, f.__name__)
    assert set(core.__all__) <= set(A.kernelized.__all__)  # the former module's star-import


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.ModuleList([A.RelativeMHA(8, 2, position="rope", batch_first=True),
                                A.KernelizedMHA(8, 2, num_features=4, batch_first=True)])


# the classes of _model() and where they lived before the split
FORMER_HOMES = {
    A.RelativeMHA: "posenc.attention.mha",
    A.KernelizedMHA: "posenc.attention.mha",
    A.RotaryEmbedding: "posenc.attention.rotary",
    A.KernelizedAttention: "posenc.attention.layers",
    A.PositiveRandomFeatures: "posenc.attention.features",
}


def _saved_with_former_paths(save) -> bytes:
    """``save(model)``'s bytes, written while the classes said they lived under their former modules."""
    model = _model()
    assert {type(m) for m in model.modules()} >= set(FORMER_HOMES)
    now = {cls: cls.__module__ for cls in FORMER_HOMES}
    try:
        for cls, home in FORMER_HOMES.items():
            cls.__module__ = home
        data = save(model)
    finally:
        for cls, home in now.items():
            cls.__module__ = home
    assert b"posenc.attention.rotary\nRotaryEmbedding" in data and b"posenc.attention.relative" not in data
    return data


def _outputs(model: torch.nn.Module) -> list[torch.Tensor]:
    """The RoPE layer's output and every tensor of the model's state (features included)."""
    x = torch.linspace(-1, 1, 2 * 5 * 8).view(2, 5, 8)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    return [model[0](x, x, x, need_weights=False)[0], *(state[k] for k in sorted(state))]


def test_pickle_and_torch_load_of_a_model_saved_under_the_former_paths():
    expected = _outputs(_model())
    for save, load in (
        (lambda m: pickle.dumps(m, protocol=2), pickle.loads),
        (lambda m: _torch_save(m), lambda b: torch.load(io.BytesIO(b), weights_only=False)),
    ):
        model = load(_saved_with_former_paths(save))
        assert type(model[0]) is A.RelativeMHA and type(model[1].attention) is A.KernelizedAttention
        got_all = _outputs(model)
        assert len(got_all) == len(expected) > 8
        for got, want in zip(got_all, expected):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def _torch_save(model) -> bytes:
    buf = io.BytesIO()
    torch.save(model, buf)
    return buf.getvalue()


def test_a_former_path_is_the_first_import_of_a_fresh_interpreter():
    code = ("import posenc.attention.toeplitz as t, posenc.attention.relative.rotary as r\n"
            "from posenc.attention.rotary import RotaryEmbedding\n"
            "assert t.__name__ == 'posenc.attention.kernelized.toeplitz' and RotaryEmbedding is r.RotaryEmbedding\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
