"""Read the RoPE of a Hugging Face model config: ``rope_theta``, ``rope_scaling`` / ``rope_parameters``.

:func:`rope_from_hf_config` turns a model's ``config.json`` (a dict, or any object
with the same attributes, such as ``transformers.PretrainedConfig``) into what
:class:`~posenc.attention.relative.rotary.RotaryEmbedding` takes: the head dim, the number
of rotated channels, the base and a :class:`~posenc.attention.relative.rope_scaling.RopeScaling`.
It follows ``transformers.modeling_rope_utils`` (v4.4x ``rope_scaling`` and v5
``rope_parameters``):

* ``head_dim`` is ``config.head_dim`` or ``hidden_size // num_attention_heads``; the
  rotated channels are ``int(head_dim * partial_rotary_factor)``;
* the scaling's type is ``rope_type`` (or the older ``type``), default ``"default"``; the old
  Phi-3 name ``"su"`` is ``"longrope"``, and so is ``"yarn"`` in a Phi-3 config
  (``model_type: "phi3"``), as Hugging Face's ``Phi3Config`` reads them;
* ``proportional`` (Gemma 4's global layers) rotates all ``head_dim`` channels: the first
  ``int(partial_rotary_factor * head_dim // 2)`` pairs at ``rope_theta ** (-2 i / head_dim) / factor``
  (``factor`` default 1), the others at frequency 0, as ``_compute_proportional_rope_parameters``;
* ``yarn``, ``llama3`` and ``longrope`` read ``original_max_position_embeddings``
  (a top-level field wins, as for Phi-3; else the one in the rope dict; else
  ``max_position_embeddings``); ``dynamic`` scales from ``max_position_embeddings``;
* a missing ``factor`` of ``yarn`` / ``longrope`` is ``max_position_embeddings /
  original_max_position_embeddings``; YaRN's ``beta_fast`` / ``beta_slow`` default to
  32 / 1, ``truncate`` to True, and ``attention_factor`` to ``0.1 ln s + 1`` (or
  DeepSeek's ``mscale`` / ``mscale_all_dim`` ratio).

An unknown rope type or a missing field is a ``ValueError`` that names it. posenc is stricter
than Hugging Face in two places, where HF silently reads a value as something else:
``truncate`` must be a JSON boolean (HF reads the string ``"false"`` as True), and
``beta_fast`` / ``beta_slow`` must be numbers > 0 (HF turns 0 into the default 32 / 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from posenc.attention.relative.rope_scaling import RopeScaling

#: The rope types :func:`rope_from_hf_config` reads (Hugging Face's names).
HF_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope", "proportional")
#: Old names Hugging Face still reads: Phi-3's ``"su"`` is LongRoPE.
HF_ROPE_ALIASES = {"su": "longrope"}

_DEFAULT_THETA = 10000.0  # transformers' default rope_theta


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def _number(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ValueError(f"{where}[{key!r}] must be a finite number, got {value!r}")
    return float(value)


def _bool(where: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where}[{key!r}] must be true or false (a JSON boolean), got {value!r} "
                         f"({type(value).__name__}; Hugging Face would read any non-empty string as true)")
    return value


def _int(where: str, key: str, value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}[{key!r}] must be a positive integer, got {value!r}")
    return value


def _rope_dict(config: Any, layer_type: str | None) -> tuple[str, dict]:
    for key in ("rope_parameters", "rope_scaling"):
        params = _get(config, key)
        if params is not None:
            break
    else:
        return "config", {}
    if not isinstance(params, Mapping):
        raise ValueError(f"config[{key!r}] must be a dict, got {type(params).__name__}")
    nested = [k for k, v in params.items() if isinstance(v, Mapping)]
    if nested:
        if layer_type is None:
            raise ValueError(f"config[{key!r}] holds per-layer rope parameters ({', '.join(map(repr, nested))}): "
                             "pass layer_type= to pick one")
        if layer_type not in nested:
            raise ValueError(f"layer_type must be one of {', '.join(map(repr, nested))}; got {layer_type!r}")
        return f"config[{key!r}][{layer_type!r}]", dict(params[layer_type])
    if layer_type is not None:
        raise ValueError(f"layer_type={layer_type!r} given but config[{key!r}] is not per-layer")
    return f"config[{key!r}]", dict(params)


def rope_from_hf_config(config: Any, *, layer_type: str | None = None, head_dim_key: str = "head_dim") -> dict:
    """``{"head_dim", "rotary_dim", "base", "scaling", "max_position_embeddings"}`` of a Hugging Face config.

    Args:
        config: ``config.json`` as a dict, or an object with those attributes.
        layer_type: for per-layer rope parameters (``rope_parameters`` keyed by layer type).
        head_dim_key: the config field holding the head dim (HF's argument of the same name:
            Gemma 4's global layers read ``"global_head_dim"``); without it,
            ``hidden_size // num_attention_heads``.
    """
    if not isinstance(config, Mapping) and not hasattr(config, "__dict__"):
        raise TypeError(f"config must be a dict (config.json) or a config object, got {type(config).__name__}")
    if not isinstance(head_dim_key, str):
        raise TypeError(f"head_dim_key must be a str (a config field), got {type(head_dim_key).__name__}")
    where, params = _rope_dict(config, layer_type)
    rope_type = params.get("rope_type", params.get("type", "default"))
    rope_type = HF_ROPE_ALIASES.get(rope_type, rope_type) if isinstance(rope_type, str) else rope_type
    if rope_type == "yarn" and _get(config, "model_type") == "phi3":
        rope_type = "longrope"  # Phi3Config reads its old "yarn" as LongRoPE
    if rope_type not in HF_ROPE_TYPES:
        raise ValueError(f"{where}['rope_type'] must be one of {', '.join(map(repr, HF_ROPE_TYPES))} (or the alias "
                         f"'su'); got {rope_type!r}")

    head_dim = _get(config, head_dim_key)
    if head_dim is None:
        hidden, heads = _get(config, "hidden_size"), _get(config, "num_attention_heads")
        if hidden is None or heads is None:
            raise ValueError(f"config needs {head_dim_key}, or hidden_size and num_attention_heads")
        head_dim = _int("config", "hidden_size", hidden) // _int("config", "num_attention_heads", heads)
    head_dim = _int("config", head_dim_key, head_dim)
    prf = params.get("partial_rotary_factor", _get(config, "partial_rotary_factor"))
    prf = 1.0 if prf is None else _number(where, "partial_rotary_factor", prf)
    if not 0.0 < prf <= 1.0:
        raise ValueError(f"{where}['partial_rotary_factor'] must be in (0, 1], got {prf}")
    # proportional RoPE rotates the whole head (the share decides how many pairs turn)
    rotary_dim = head_dim if rope_type == "proportional" else int(head_dim * prf)
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"head_dim * partial_rotary_factor = {rotary_dim} rotated channels: must be even and >= 2")
    theta = params.get("rope_theta", _get(config, "rope_theta"))
    base = _DEFAULT_THETA if theta is None else _number(where, "rope_theta", theta)

    max_pos = _get(config, "max_position_embeddings")
    if max_pos is not None:
        max_pos = _int("config", "max_position_embeddings", max_pos)

    def need(key: str):
        if params.get(key) is None:
            raise ValueError(f"{where} lacks {key!r}, which rope_type {rope_type!r} needs")
        return params[key]

    def original() -> int:
        top = _get(config, "original_max_position_embeddings")
        value = top if top is not None else params.get("original_max_position_embeddings", max_pos)
        if value is None:
            raise ValueError(f"{where} lacks 'original_max_position_embeddings' (and config lacks "
                             f"max_position_embeddings), which rope_type {rope_type!r} needs")
        return _int(where, "original_max_position_embeddings", value)

    def optional(key: str):
        v = params.get(key)
        return None if v is None else _number(where, key, v)

    def positive(key: str, default: float) -> float:
        # HF reads `params.get(key) or default`: a 0 becomes the default; refused here
        v = optional(key)
        if v is None:
            return default
        if not v > 0:
            raise ValueError(f"{where}[{key!r}] must be > 0, got {params[key]!r} (Hugging Face would silently use "
                             f"{default:g} instead)")
        return v

    def factor_or_ratio(L: int) -> float:
        # yarn and longrope: the given factor, else the extended length over the original one
        factor = optional("factor")
        if factor is None:
            if max_pos is None:
                raise ValueError(f"{where} lacks 'factor' (and config lacks max_position_embeddings)")
            factor = max_pos / L
        return factor

    scaling = None
    if rope_type == "linear":
        factor = _number(where, "factor", need("factor"))
        scaling = RopeScaling("linear", max_pos or 1, factor=factor)
    elif rope_type == "dynamic":
        if max_pos is None:
            raise ValueError("config lacks 'max_position_embeddings', which rope_type 'dynamic' needs")
        scaling = RopeScaling("dynamic", max_pos, factor=_number(where, "factor", need("factor")))
    elif rope_type == "yarn":
        L = original()
        factor = factor_or_ratio(L)
        scaling = RopeScaling(
            "yarn", L, target_length=max_pos, factor=factor,
            beta=positive("beta_fast", 32.0), alpha=positive("beta_slow", 1.0),
            truncate=_bool(where, "truncate", params.get("truncate", True)),
            attention_factor=optional("attention_factor"),
            mscale=optional("mscale"), mscale_all_dim=optional("mscale_all_dim"),
        )
    elif rope_type == "llama3":
        L = original()
        scaling = RopeScaling(
            "llama3", L, target_length=max_pos, factor=_number(where, "factor", need("factor")),
            low_freq_factor=_number(where, "low_freq_factor", need("low_freq_factor")),
            high_freq_factor=_number(where, "high_freq_factor", need("high_freq_factor")),
        )
    elif rope_type == "longrope":
        L = original()
        factor = factor_or_ratio(L)
        short, long = need("short_factor"), need("long_factor")
        for key, v in (("short_factor", short), ("long_factor", long)):
            if not isinstance(v, (list, tuple)) or len(v) != rotary_dim // 2:
                raise ValueError(f"{where}[{key!r}] must be a list of rotary_dim / 2 = {rotary_dim // 2} numbers, "
                                 f"got {v!r:.80}")
        scaling = RopeScaling("longrope", L, target_length=max_pos, factor=max(factor, 1.0),
                              short_factor=tuple(short), long_factor=tuple(long),
                              attention_factor=optional("attention_factor") if factor >= 1.0 else 1.0)
    elif rope_type == "proportional":
        factor = optional("factor")
        # HF: int(partial_rotary_factor * head_dim // 2) pairs turn (a float floor division)
        pairs = int(prf * head_dim // 2)
        scaling = RopeScaling("proportional", max_pos or 1, factor=1.0 if factor is None else factor,
                              rotated_pairs=pairs)
    return {"head_dim": head_dim, "rotary_dim": rotary_dim, "base": base, "scaling": scaling,
            "max_position_embeddings": max_pos}
