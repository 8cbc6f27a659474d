"""One string factory for every encoding: ``create_encoding("gaussian", sigma=0.01)``.

The registry is a table that the encoding modules fill with :func:`register_encoding` when
they are imported; it imports none of them. ``posenc.encodings`` imports every encoding
module, and importing this module runs ``posenc.encodings`` first, so the table is full
whenever it is read.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from torch import nn

_REGISTRY: dict[str, Callable[..., nn.Module]] = {}

T = TypeVar("T", bound=Callable[..., nn.Module])


def register_encoding(name: str, **defaults: Any) -> Callable[[T], T]:
    """Class decorator registering an encoding under ``name``.

    ``defaults`` are keyword arguments bound at creation (so one class can be
    registered under several names, e.g. the circulant generators). Registering
    a name twice is an error.
    """

    def decorator(factory: T) -> T:
        if name in _REGISTRY:
            raise ValueError(f"encoding name {name!r} is already registered")
        if defaults:
            def make(**kwargs: Any) -> nn.Module:
                clash = sorted(set(defaults) & set(kwargs))
                if clash:
                    raise TypeError(f"encoding {name!r} fixes {', '.join(clash)}; do not pass it")
                return factory(**defaults, **kwargs)

            make.__doc__ = factory.__doc__
            make.__wrapped__ = factory  # type: ignore[attr-defined]
            make.fixed = defaults  # type: ignore[attr-defined]
            _REGISTRY[name] = make
        else:
            _REGISTRY[name] = factory
        return factory

    return decorator


def available_encodings() -> list[str]:
    """Names accepted by :func:`create_encoding`, sorted."""
    return sorted(_REGISTRY)


def encoding_class(name: str) -> type:
    """The class behind a registered name."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown encoding {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    factory = _REGISTRY[name]
    return getattr(factory, "__wrapped__", factory)  # type: ignore[return-value]


def encoding_parameters(name: str) -> dict[str, Any]:
    """Constructor arguments of ``name`` with their defaults (fixed ones excluded)."""
    cls = encoding_class(name)
    fixed = getattr(_REGISTRY[name], "fixed", {})
    sig = inspect.signature(cls)
    return {
        p.name: (None if p.default is inspect.Parameter.empty else p.default)
        for p in sig.parameters.values()
        if p.name not in fixed and p.kind is not inspect.Parameter.VAR_KEYWORD
    }


def _args_block(doc: str) -> dict[str, str]:
    """``{argument: description}`` from a Google-style ``Args:`` block (``a, b: text`` covers both)."""
    out: dict[str, str] = {}
    lines = inspect.cleandoc(doc or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Args:")
    except StopIteration:
        return out
    indent = None
    current: list[str] = []
    for line in lines[start + 1 :]:
        if not line.strip():
            if indent is not None:
                break
            continue
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width < indent:
            break
        if width == indent and ":" in line:
            names, _, text = line.strip().partition(":")
            current = [n.strip() for n in names.split(",")]
            for n in current:
                out[n] = text.strip()
        elif current:
            for n in current:
                out[n] = f"{out[n]} {line.strip()}".strip()
    return out


def encoding_parameter_docs(name: str) -> dict[str, str]:
    """What each constructor argument of encoding ``name`` means (from its docstring's Args block).

    Every argument :func:`encoding_parameters` lists has an entry (``""`` if undocumented).
    """
    cls = encoding_class(name)
    docs = _args_block(cls.__doc__ or "")
    for base in cls.__mro__[1:]:  # arguments documented on a base class ("see :class:`CoordinateEncoding`")
        for key, text in _args_block(base.__doc__ or "").items():
            if not docs.get(key) or docs[key].startswith("see "):
                docs[key] = text
    return {p: docs.get(p, "") for p in encoding_parameters(name)}


def _check_call(name: Any, kwargs: dict) -> None:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown encoding {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    allowed = encoding_parameters(name)
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise TypeError(
            f"encoding {name!r} got unexpected argument(s) {', '.join(unknown)}; "
            f"it takes {', '.join(allowed)}"
        )


def encoding_footprint(name: str, **kwargs: Any):
    """Sizes of ``create_encoding(name, **kwargs)`` from the arguments alone: nothing is built.

    For a memory check before construction: ``num_features=2**40`` costs nothing here.
    The size arguments are validated as the constructor validates them (an ``out_dim``
    above ``2**31 - 1`` is refused); widths and seeds are not looked at.

    Returns:
        :class:`~posenc.encodings.base.Footprint` ``(out_dim, parameters, buffers)``
        (element counts; ``.nbytes(dtype)`` gives bytes).

    Raises:
        ValueError: unknown name, or size arguments the constructor would refuse.
        TypeError: an argument the encoding does not take, or of the wrong type.
    """
    _check_call(name, kwargs)
    cls = encoding_class(name)
    return cls.footprint(**getattr(_REGISTRY[name], "fixed", {}), **kwargs)


def create_encoding(name: str, **kwargs: Any) -> nn.Module:
    """Build a registered encoding by name.

    Args:
        name: one of :func:`available_encodings`.
        **kwargs: constructor arguments of that encoding.

    Raises:
        ValueError: unknown name (the message lists the known ones).
        TypeError: an argument the encoding does not take.
    """
    _check_call(name, kwargs)
    return _REGISTRY[name](**kwargs)
