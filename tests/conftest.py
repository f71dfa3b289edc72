import os
from pathlib import Path

import pytest
import torch

from plm_toolkit.config import setup

# Schemas, registries and resolvers, as the entry points set them up before Hydra composes.
setup()

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("PLM_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    """../shared/data beside the checkout; tests that need it skip cleanly where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
