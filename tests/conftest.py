"""Shared test set-up: offline Hugging Face, and the oracle's version in the report."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


def _oracle_versions() -> str:
    import torch

    try:
        import transformers

        hf = transformers.__version__
    except ImportError:  # pragma: no cover
        hf = "not installed (oracle tests skip)"
    return f"relpos oracle: transformers {hf}; torch {torch.__version__}"


def pytest_report_header(config):
    return _oracle_versions()


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"compared against {_oracle_versions().split(': ', 1)[1]}")


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module's tests (timing-free, but xdist workers share 2 cores); restored after."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def _flex_eager_without_dynamo(request, monkeypatch):
    """A ``flex_eager`` test runs FlexAttention's higher-order op eagerly, without dynamo's trace of each new
    score_mod (seconds a trace on CPU): torch's own debug switch, patched for the test only. The same
    score_mods and block masks are computed; the slow tier runs the default reference and the compiled kernel."""
    if request.node.get_closest_marker("flex_eager") is not None:
        import torch.nn.attention.flex_attention as fa

        monkeypatch.setattr(fa, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True)
    yield


def pytest_collection_modifyitems(config, items):
    """Compiling FlexAttention takes seconds a kernel on a CPU: every test that compiles it (a
    ``flex`` backend in its parameters, or flex in its name) is ``slow`` like the explicitly
    marked ones, so ``make unit`` (``-m "not slow"``) stays fast; ``make test`` runs them all. A test
    marked ``flex_eager`` runs FlexAttention's eager reference only (``compiled=False``) and stays fast."""
    for item in items:
        if item.get_closest_marker("flex_eager") is not None:
            continue
        params = getattr(getattr(item, "callspec", None), "id", "") or ""
        if "flex" in item.originalname or "flex" in params.split("-"):
            item.add_marker(pytest.mark.slow)
