"""Provenance shared by the benchmarks and the lab: which code produced a result."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout, when relpos_core is installed editable


def git_commit() -> str:
    """HEAD of the checkout (``-dirty`` with local changes to tracked files), or
    ``RELPOS_GIT_COMMIT`` when the code runs from a copy of the tree without ``.git``
    (a GPU machine that received the working tree). Take it *before* a long run, so edits
    made while it runs do not count."""
    if os.environ.get("RELPOS_GIT_COMMIT"):
        return os.environ["RELPOS_GIT_COMMIT"] + " (from RELPOS_GIT_COMMIT)"
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return "unknown (not a git checkout)"
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError) as err:  # no git on the machine
        return f"unknown ({type(err).__name__})"
