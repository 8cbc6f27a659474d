"""The ``posenc`` command's entry point (``python -m posenc`` too).

It checks the ``cli`` extra before importing :mod:`posenc.cli`: in an environment with only
the core dependencies (torch, numpy, scipy), the command prints one ``error:`` line naming
the extra to install and exits with code 2, instead of a traceback from ``import typer``.
"""

from __future__ import annotations

import sys

#: what the command cannot start without (the rest of the ``cli`` extra is checked where it is used)
STARTUP = ("typer", "rich")


def main() -> None:
    from posenc._extras import install_hint, missing_modules

    missing = missing_modules(STARTUP)
    if missing:
        sys.stderr.write(f"error: {install_hint(missing[0], 'the posenc command')}\n")
        sys.exit(2)
    from posenc.cli import main as cli_main

    cli_main()


if __name__ == "__main__":  # pragma: no cover - python -m posenc
    main()
