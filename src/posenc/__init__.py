"""posenc: positional encodings across modalities.

Importing :mod:`posenc` loads the library only (positions, encodings, analysis);
the command line, the experiments and the report live in sub-packages that are
imported on demand and pull in their own optional dependencies.
"""

from __future__ import annotations

__version__ = "0.1.0"

from posenc.encodings import (  # noqa: E402
    Encoding,
    available_encodings,
    create_encoding,
    register_encoding,
)

__all__ = [
    "__version__",
    "Encoding",
    "available_encodings",
    "create_encoding",
    "register_encoding",
]
