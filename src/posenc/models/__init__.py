"""Models that consume positional encodings (coordinate networks, small transformers)."""
