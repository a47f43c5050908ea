"""Every library module names its paper or book chapter, and the chapter files it names exist."""
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import relpos_core

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(
    m.name for m in pkgutil.walk_packages(relpos_core.__path__, "relpos_core.") if not m.name.split(".")[-1].startswith("_")
)


@pytest.mark.parametrize("name", [m for m in MODULES if ".schemes." in m or ".kernels." in m or ".measure." in m])
def test_module_docstring_points_to_an_existing_chapter(name):
    doc = importlib.import_module(name).__doc__ or ""
    if name.endswith("__init__") or importlib.import_module(name).__file__.endswith("__init__.py"):
        return
    chapters = re.findall(r"chapters/[\w.]+\.ipynb", doc.replace("\n", ""))
    assert chapters, f"{name}: the docstring names no chapter file"
    for chapter in chapters:
        assert (ROOT / chapter).is_file(), f"{name} points to {chapter}, which does not exist"
