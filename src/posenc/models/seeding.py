"""Seeded initialisation of a model's trunk, independent of its positional encoding.

Comparing positional encodings fairly needs **paired** runs: with the same seed,
every encoding should meet the *same* transformer (same initial weights) and the
same batches, so that the per-seed difference measures the encoding and nothing
else. Built the usual way, a model draws its weights from torch's global RNG in
construction order; an encoding built first consumes a different number of draws
(a table, an MLP, nothing), so the transformer after it starts elsewhere.

:func:`seeded_reset_parameters` redraws every parameter of a module except those
of the modules it is told to skip (the encoding), each with the module's own
``reset_parameters`` (PyTorch's default distributions), from a stream seeded by
``seed`` alone. The global RNG is left as it was. ``TransformerEncoder`` and
``TinyViT`` call it when given ``init_seed``; the encoding keeps its own seed.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from posenc._checks import check_positive_int


def _targets(root: nn.Module, skip: set[int]) -> list[tuple[str, nn.Module]]:
    """Top-down: the highest modules under ``root`` that define ``reset_parameters``.

    A module that defines it is reset as a whole (its own logic decides its children);
    one that does not is descended into. A module that owns parameters directly but has
    no ``reset_parameters`` cannot be redrawn: a ``TypeError`` names it.
    """
    found: list[tuple[str, nn.Module]] = []

    def visit(prefix: str, module: nn.Module) -> None:
        for name, child in module.named_children():
            path = f"{prefix}{name}"
            if id(child) in skip:
                continue
            if callable(getattr(child, "reset_parameters", None)):
                found.append((path, child))
                continue
            if next(child.parameters(recurse=False), None) is not None:
                raise TypeError(
                    f"module {path!r} ({type(child).__name__}) owns parameters but has no reset_parameters(), "
                    "so init_seed cannot redraw them; give it one"
                )
            visit(path + ".", child)

    visit("", root)
    return found


def seeded_reset_parameters(module: nn.Module, seed: int | None, *, skip: Iterable[nn.Module | None] = ()) -> list[str]:
    """Redraw ``module``'s parameters from ``seed``, except those of ``skip``.

    Every submodule (below ``module`` itself) is reset with its own ``reset_parameters``,
    in registration order, from torch's default generator(s) seeded with ``seed`` inside
    :func:`torch.random.fork_rng`, so the caller's RNG state is restored afterwards. Two
    modules with the same structure outside ``skip`` therefore get identical parameters
    from the same seed, whatever ``skip`` holds and whatever the global RNG did before.
    ``module``'s own direct parameters are left to its own ``reset_parameters``.

    Args:
        module: the model (e.g. a transformer whose encoding is in ``skip``).
        seed: seed of the draws (int >= 0); ``None`` draws from torch's global RNG as it
            stands (a plain reset of everything outside ``skip``).
        skip: modules whose parameters are left alone (``None`` entries are ignored).

    Returns:
        The dotted names of the submodules that were reset (in order).

    Raises:
        TypeError: ``module`` is not an ``nn.Module``, ``seed`` is not an int, or a submodule
            owns parameters but has no ``reset_parameters``.
        ValueError: ``seed < 0``.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if seed is not None:
        check_positive_int("seed", seed, minimum=0)
    skip_ids = {id(m) for s in skip if s is not None for m in s.modules()}
    targets = _targets(module, skip_ids)
    if seed is None:
        for _, child in targets:
            child.reset_parameters()
        return [name for name, _ in targets]
    cuda = sorted({p.device.index or 0 for p in module.parameters() if p.device.type == "cuda"})
    with torch.random.fork_rng(devices=cuda):
        torch.random.default_generator.manual_seed(seed)
        for index in cuda:
            torch.cuda.default_generators[index].manual_seed(seed)
        for _, child in targets:
            child.reset_parameters()
    return [name for name, _ in targets]
