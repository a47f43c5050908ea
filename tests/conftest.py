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
