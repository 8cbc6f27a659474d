"""Positional encodings: every map ``positions (..., in_dim) -> features (..., out_dim)``."""

from posenc.encodings.base import CoordinateEncoding, Encoding, Footprint
from posenc.encodings.registry import (
    available_encodings,
    create_encoding,
    encoding_class,
    encoding_footprint,
    encoding_parameter_docs,
    encoding_parameters,
    register_encoding,
)

# Importing the encoding modules fills the registry's table (their @register_encoding lines).
from posenc.encodings.fourier import (  # noqa: E402  (registration order)
    BasicFourierEncoding,
    LinearFourierEncoding,
    LogFourierEncoding,
    RandomFourierEncoding,
    fourier_features,
)
from posenc.encodings.basis import (  # noqa: E402
    CirculantEncoding,
    GaussianEncoding,
    TriangleEncoding,
    circulant_generator,
    gaussian_basis,
    triangle_basis,
)
from posenc.encodings.sinusoidal import (  # noqa: E402
    SinusoidalEncoding,
    sinusoidal_features,
    sinusoidal_frequencies,
)
from posenc.encodings.learnable import (  # noqa: E402
    CoordinateMLPEncoding,
    LearnableFourierEncoding,
    LearnedTableEncoding,
    learnable_fourier_features,
    resample_table,
)
from posenc.encodings.cape import (  # noqa: E402
    PRESETS as CAPE_PRESETS,
    CAPEEncoding,
    cape_features,
    cape_frequencies,
)

__all__ = [
    "Encoding",
    "CoordinateEncoding",
    "available_encodings",
    "create_encoding",
    "encoding_class",
    "encoding_footprint",
    "Footprint",
    "encoding_parameter_docs",
    "encoding_parameters",
    "register_encoding",
    "BasicFourierEncoding",
    "LinearFourierEncoding",
    "LogFourierEncoding",
    "RandomFourierEncoding",
    "fourier_features",
    "GaussianEncoding",
    "TriangleEncoding",
    "CirculantEncoding",
    "gaussian_basis",
    "triangle_basis",
    "circulant_generator",
    "SinusoidalEncoding",
    "sinusoidal_features",
    "sinusoidal_frequencies",
    "LearnedTableEncoding",
    "LearnableFourierEncoding",
    "CoordinateMLPEncoding",
    "learnable_fourier_features",
    "resample_table",
    "CAPEEncoding",
    "CAPE_PRESETS",
    "cape_features",
    "cape_frequencies",
]
