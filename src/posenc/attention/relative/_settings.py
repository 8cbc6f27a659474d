"""Settings of the relative-position modules that are fixed once the module is built.

A module that derives state from a setting at construction (a cos/sin table from the
rotated width, projections split by the number of heads) either rebuilds that state when
the setting is reassigned, or refuses the assignment: :func:`fixed_setting` gives the
read-only attribute, whose assignment raises :class:`ReadOnlySettingError` naming the
setting, why it is fixed, and the value that was assigned. A silent reassignment that
leaves derived state behind would give outputs that no freshly built module gives.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReadOnlySettingError", "fixed_setting"]


class ReadOnlySettingError(AttributeError, ValueError):
    """Assignment to a setting that is fixed at construction.

    An ``AttributeError`` (what assigning a read-only attribute raises in Python) and a
    ``ValueError`` (a value the module cannot take), so ``except`` of either catches it.
    """


def fixed_setting(name: str, why: str) -> property:
    """A read-only attribute ``name`` stored as ``self._<name>``; assigning it raises
    :class:`ReadOnlySettingError` saying ``why`` it is fixed and how to get the other value.

    Args:
        name: the attribute (the constructor's argument of the same name).
        why: what the module built from it, e.g. ``"the cos/sin table has rotary_dim / 2 columns"``.
    """
    attr = "_" + name

    def get(self) -> Any:
        return self.__dict__[attr]

    def refuse(self, value: Any) -> None:
        cls = type(self).__name__
        raise ReadOnlySettingError(
            f"{cls}.{name} is fixed at construction ({why}); got an assignment of {value!r} (current value "
            f"{self.__dict__[attr]!r}): build a new {cls}(..., {name}={value!r}) instead"
        )

    return property(get, refuse, doc=f"Read-only: {why}.")
