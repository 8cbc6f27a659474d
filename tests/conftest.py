import os

import pytest
import torch

# Two xdist workers on a 2-core machine: one thread each avoids oversubscription.
torch.set_num_threads(int(os.environ.get("POSENC_TEST_THREADS", "1")))

try:
    from hypothesis import settings

    settings.register_profile("posenc", max_examples=40, deadline=None)
    settings.load_profile("posenc")
except ImportError:  # pragma: no cover
    pass


@pytest.fixture
def rng() -> torch.Generator:
    return torch.Generator().manual_seed(1234)
