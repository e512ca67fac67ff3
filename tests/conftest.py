"""Shared fixtures and the ``gpu`` marker. Data: ``tiny_mnist`` (synthetic, fast),
``real_mnist_mirror`` and ``real_mnist`` (the real files from the offline mirror
``../shared/mnist``; skipped without it). Tests marked ``gpu`` are skipped, with the reason, where
torch sees no CUDA GPU (:func:`pytest_collection_modifyitems`); a test needs no ``skipif`` of its
own."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnistbench.data import files
from mnistbench.data import mnist as data

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The offline MNIST mirror beside the repository (gzipped IDX files).
SHARED_MNIST = REPO_ROOT.parent / "shared" / "mnist"
TINY_TRAIN = 512  # samples in the train split of ``tiny_mnist``
TINY_TEST = 256  # samples in the test split of ``tiny_mnist``


def load_benchmark(name: str):
    """The module benchmarks/NAME.py (benchmarks are scripts, not a package), loaded once."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
#: What gives the ``gpu`` tests a GPU, for the skip reason.
GPU_HINT = ("run them on a machine with an NVIDIA GPU, its driver and a CUDA build of torch "
            "(`pytest -m gpu`; scripts/gpu-check runs them on a fresh GPU machine)")


def no_gpu_reason() -> str | None:
    """Why the ``gpu`` tests cannot run here, or None when torch sees a CUDA GPU."""
    import torch  # here, not at the top: only a session that collects a gpu test pays for it

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        why = f"torch {torch.__version__} is a CPU-only build"
    else:
        why = f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA GPU"
    return f"needs a CUDA GPU: {why}; {GPU_HINT}"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which picks "load" for a bare -n
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``-n N`` without ``--dist`` distributes by work stealing, as scripts/test does: each
    worker starts on one half of the tests in order, so a module's tests and the studies they
    share mostly stay on one worker (xdist's default, "load", deals the tests out in turn, and
    both workers built every shared study). Where pytest-xdist is not installed, nothing."""
    if getattr(config.option, "numprocesses", None) and config.option.dist == "no":
        config.option.dist = "worksteal"


#: Markers whose tests are also ``slow``: they drive a real Docker engine or SLURM cluster (image
#: builds, whole studies as cluster jobs: minutes), so the fast loop leaves them out even where
#: an engine or a cluster answers.
SLOW_MARKERS = ("docker", "slurm")


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`SLOW_MARKERS` ``slow`` too; implement the ``first`` marker:
    those tests move to the front (so pytest-xdist's first worker starts with them, and the
    longest test never ends the run alone), in their order; and the ``gpu`` marker: skip the
    marked tests where torch sees no CUDA GPU."""
    for item in items:
        if any(item.get_closest_marker(name) for name in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("first") is None)  # stable
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = no_gpu_reason()
    if reason is None:
        return
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def schema_files_parsed_once():
    """Snakemake's ``validate`` parses a schema file again at every ``$ref`` into it (about
    13 YAML parses of workflow/schemas/ per validation: half a second, in pure-Python YAML).
    In the tests' own process each schema's text is parsed once and every caller gets a copy;
    the workflow's processes (the snakemake runs) are untouched."""
    import copy
    import hashlib

    from snakemake import utils

    load = utils._load_configfile
    parsed: dict[tuple[str, bytes], object] = {}

    def once(source, filetype="Config"):
        if not isinstance(source, str | Path):
            return load(source, filetype)
        try:
            text = Path(source).read_bytes()
        except OSError:
            return load(source, filetype)  # its own error, naming the file
        key = (filetype, hashlib.sha256(text).digest())
        if key not in parsed:
            parsed[key] = load(source, filetype)
        return copy.deepcopy(parsed[key])

    utils._load_configfile = once
    yield
    utils._load_configfile = load


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
    missing = [n for n in files.FILES if not (SHARED_MNIST / f"{n}.gz").is_file()]
    if missing:
        pytest.skip(f"offline MNIST mirror {SHARED_MNIST} lacks {', '.join(missing)}")
    return SHARED_MNIST


@pytest.fixture(scope="session")
def real_mnist(real_mnist_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the real, verified MNIST files, fetched once per session from the mirror."""
    dest = tmp_path_factory.mktemp("real_mnist")
    data.fetch(dest, [str(real_mnist_mirror)], retries=0, timeout=30.0, log=None)
    return dest


# The report tests' studies (tests/report/test_report_studies.py builds each once per process): one
# fixture each, shared by every report test module.
@pytest.fixture(scope="session")
def full(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A GPU study with three repeats, an oom and a failed cell, rendered without charts."""
    from tests.report import test_report_studies

    return test_report_studies.full(tmp_path_factory)


@pytest.fixture(scope="session")
def full_charts(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """:func:`full` rendered with its charts and --figures-dir (only its tests draw them)."""
    from tests.report import test_report_studies

    return test_report_studies.full_charts(tmp_path_factory)


@pytest.fixture(scope="session")
def tenfold(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A GPU study at the blog's full settings with tips cells and one busy CPU repeat."""
    from tests.report import test_report_studies

    return test_report_studies.tenfold(tmp_path_factory)


@pytest.fixture(scope="session")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The quick study's shape on a machine without a GPU."""
    from tests.report import test_report_studies

    return test_report_studies.quick(tmp_path_factory)


@pytest.fixture(scope="session")
def blogcode(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A GPU study whose convergence holds the blog's code and this project's best."""
    from tests.report import test_report_studies

    return test_report_studies.blogcode(tmp_path_factory)
