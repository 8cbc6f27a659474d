"""Results on disk, figures and the markdown report (imports matplotlib on demand)."""
