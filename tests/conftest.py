"""Suite-wide isolation: no test reads or writes the user's profile store or caches."""

import os
import shutil
import tempfile

import pytest

_ROOT = tempfile.mkdtemp(prefix="hetplan-tests-")
# Assigned, not defaulted: a user's own HETPLAN_* settings must not leak into the tests.
os.environ["HETPLAN_PROFILE_DIR"] = os.path.join(_ROOT, "profiles")
os.environ["HETPLAN_CACHE_DIR"] = os.path.join(_ROOT, "cache")


@pytest.fixture(scope="session", autouse=True)
def _remove_scratch() -> object:
    yield
    shutil.rmtree(_ROOT, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` need real CUDA: skipped where torch sees none (CI has no GPU)."""
    del config
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (marked gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
