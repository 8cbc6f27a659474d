"""Result schemas: the types a section's summary reads from a stored job result.

A checksum proves that a record is what was written; it does not prove that what was
written is what the summary expects (a record edited and re-checksummed, or written by a
tool, can carry a string where a number belongs). Each job declares the schema of its
result (:attr:`posenc.experiments.job.Job.schema`) in plain Python data, so that the
experiment modules import nothing to state it, and the store rejects a record whose result
does not match (:func:`posenc.report.store.check_job_record`): it is recomputed, like a
torn one.

The spec language:

* a type: ``float`` (any JSON number, not a bool), ``int`` (an integer, not a bool),
  ``bool``, ``str``, ``object`` (anything), ``None`` (JSON ``null``);
* a tuple: any of its specs (``(float, None)``: a number or null);
* a list ``[spec]``: a JSON array whose every element matches ``spec``;
* a dict ``{str: spec}`` (the one key is the type ``str``): an object with any keys whose
  values match ``spec``;
* any other dict ``{"name": spec, "note?": spec, ...}``: an object with these keys (a key
  ending in ``?`` may be absent; other keys are allowed and not checked).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["check", "check_spec"]


def _name(spec: Any) -> str:
    if spec is None:
        return "null"
    if isinstance(spec, type):
        return {float: "a number", int: "an integer", bool: "a bool", str: "a string",
                object: "anything"}.get(spec, spec.__name__)
    if isinstance(spec, tuple):
        return " or ".join(_name(s) for s in spec)
    if isinstance(spec, list):
        return "a list"
    return "an object"


def check(value: Any, spec: Any, path: str = "result") -> str | None:
    """Why ``value`` (parsed JSON) does not match ``spec``; ``None`` when it does.

    The reason names the first offending place, e.g. ``"result['accuracy']['16'] is not a
    number but 'abc'"``.
    """
    if spec is object:
        return None
    if spec is None:
        return None if value is None else f"{path} is not null but {value!r}"[:200]
    if isinstance(spec, tuple):
        for option in spec:
            if check(value, option, path) is None:
                return None
        return f"{path} is not {_name(spec)} but {value!r}"[:200]
    if isinstance(spec, type):
        if spec is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        elif spec is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, spec)
        return None if ok else f"{path} is not {_name(spec)} but {value!r}"[:200]
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{path} is not a list but {value!r}"[:200]
        for i, item in enumerate(value):
            problem = check(item, spec[0], f"{path}[{i}]")
            if problem is not None:
                return problem
        return None
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{path} is not an object but {value!r}"[:200]
        if set(spec) == {str}:
            for k, v in value.items():
                problem = check(v, spec[str], f"{path}[{k!r}]")
                if problem is not None:
                    return problem
            return None
        for key, sub in spec.items():
            optional = key.endswith("?")
            name = key[:-1] if optional else key
            if name not in value:
                if optional:
                    continue
                return f"{path} has no {name!r}"
            problem = check(value[name], sub, f"{path}[{name!r}]")
            if problem is not None:
                return problem
        return None
    raise TypeError(f"not a schema spec: {spec!r}")


def check_spec(spec: Any, path: str = "schema") -> None:
    """Raise ``TypeError`` naming the place where ``spec`` is not a schema of this language."""
    if spec is None or spec in (float, int, bool, str, object):
        return
    if isinstance(spec, tuple):
        if not spec:
            raise TypeError(f"{path}: an empty tuple matches nothing")
        for i, s in enumerate(spec):
            check_spec(s, f"{path}[{i}]")
        return
    if isinstance(spec, list):
        if len(spec) != 1:
            raise TypeError(f"{path}: a list spec holds exactly one element spec, got {len(spec)}")
        check_spec(spec[0], f"{path}[0]")
        return
    if isinstance(spec, dict):
        if str in spec and len(spec) != 1:
            raise TypeError(f"{path}: a mapping spec {{str: spec}} has no other keys")
        for k, v in spec.items():
            if k is not str and not isinstance(k, str):
                raise TypeError(f"{path}: keys are names or the type str, got {k!r}")
            check_spec(v, f"{path}[{k!r}]")
        return
    raise TypeError(f"{path}: not a schema spec: {spec!r}")
