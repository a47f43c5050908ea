"""The committed data the book reads, shipped with the package (``relpos_core/data/``).

Book: every chapter that shows a committed run (the decode benchmark of
chapters/08_the_kv_cache.ipynb, the benchmark runs and H200 reference data of
chapters/11_what_it_costs.ipynb, the reference data of chapters/12_failure_modes.ipynb,
the lab results of chapters/14_experiments_length.ipynb, 15_experiments_marker.ipynb,
appendix_lab_history.ipynb and 16_choosing_a_scheme.ipynb) finds its file
here, by name, so a notebook runs the same from a clone,
from a wheel, or alone in Colab after ``pip install "relpos_core[book] @ git+URL"``.
``relpos_core/data/README.md`` says what each file holds and how it was measured.

* ``names(pattern="*")``: the data files (sorted), optionally those matching a glob;
* ``path(name)``: a real filesystem path to one of them (``importlib.resources``);
* ``load_json(name)``: a JSON file, parsed;
* ``read_jsonl(name)``: a JSON-lines file, one parsed record per line.

An unknown name raises a ``ValueError`` that lists the files there are.
"""
from __future__ import annotations

import atexit
import contextlib
import fnmatch
import json
from importlib import resources as _resources
from pathlib import Path

__all__ = ["FOLDER", "names", "path", "load_json", "read_jsonl"]

#: the folder of the package that holds the data files (package data, see pyproject.toml)
FOLDER = "data"
_NOT_DATA = {"README.md"}
_EXTRACTED = contextlib.ExitStack()  # files unpacked from a zipped install, kept until exit
atexit.register(_EXTRACTED.close)
_PATHS: dict[str, Path] = {}


def _folder():
    return _resources.files("relpos_core") / FOLDER


def names(pattern: str = "*") -> list[str]:
    """The data files shipped with relpos_core whose names match ``pattern`` (a glob)."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"pattern must be a non-empty glob string such as 'bench-*.json', got {pattern!r}")
    found = [entry.name for entry in _folder().iterdir()
             if entry.is_file() and entry.name not in _NOT_DATA and not entry.name.startswith(".")]
    return sorted(name for name in found if fnmatch.fnmatch(name, pattern))


def path(name: str) -> Path:
    """A filesystem path to the data file ``name`` (e.g. ``"bench-cpu.json"``).

    From an ordinary install (a clone, a wheel) this is the file inside the package; from
    a zipped install the file is unpacked once and kept until the interpreter exits.
    """
    if not isinstance(name, str) or name not in names():
        raise ValueError(f"name must be one of the data files shipped with relpos_core {names()}, got {name!r}")
    if name not in _PATHS:
        _PATHS[name] = Path(_EXTRACTED.enter_context(_resources.as_file(_folder() / name)))
    return _PATHS[name]


def load_json(name: str):
    """The data file ``name`` (a ``.json`` file), parsed."""
    if not isinstance(name, str) or not name.endswith(".json"):
        raise ValueError(f"name must be a .json data file, one of {names('*.json')}, got {name!r}")
    return json.loads(path(name).read_text())


def read_jsonl(name: str) -> list:
    """The data file ``name`` (a ``.jsonl`` file): one parsed record per non-empty line."""
    if not isinstance(name, str) or not name.endswith(".jsonl"):
        raise ValueError(f"name must be a .jsonl data file, one of {names('*.jsonl')}, got {name!r}")
    return [json.loads(line) for line in path(name).read_text().splitlines() if line.strip()]
