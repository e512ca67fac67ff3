"""Shared fixtures. Data: ``tiny_mnist`` (synthetic, fast), ``real_mnist_mirror`` and
``real_mnist`` (the real files from the offline mirror ``../shared/mnist``; skipped without it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnistbench import data

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The offline MNIST mirror beside the repository (gzipped IDX files).
SHARED_MNIST = REPO_ROOT.parent / "shared" / "mnist"
TINY_TRAIN = 512  # samples in the train split of ``tiny_mnist``
TINY_TEST = 256  # samples in the test split of ``tiny_mnist``


@pytest.fixture(scope="session")
def tiny_mnist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the four MNIST file names holding learnable synthetic digits
    (TINY_TRAIN / TINY_TEST samples, seed 0). Shared by the session: copy it before changing it."""
    root = tmp_path_factory.mktemp("tiny_mnist")
    data.make_synthetic(root, n_train=TINY_TRAIN, n_test=TINY_TEST, seed=0)
    return root


@pytest.fixture(scope="session")
def real_mnist_mirror() -> Path:
    """The offline mirror ``../shared/mnist`` (the four ``NAME.gz`` files); skips if absent."""
    missing = [n for n in data.FILES if not (SHARED_MNIST / f"{n}.gz").is_file()]
    if missing:
        pytest.skip(f"offline MNIST mirror {SHARED_MNIST} lacks {', '.join(missing)}")
    return SHARED_MNIST


@pytest.fixture(scope="session")
def real_mnist(real_mnist_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the real, verified MNIST files, fetched once per session from the mirror."""
    dest = tmp_path_factory.mktemp("real_mnist")
    data.fetch(dest, [str(real_mnist_mirror)], retries=0, timeout=30.0, log=None)
    return dest
