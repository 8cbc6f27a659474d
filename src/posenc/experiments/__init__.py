"""One module per reproduced claim: frozen configs in, JSON-serialisable dicts out."""
