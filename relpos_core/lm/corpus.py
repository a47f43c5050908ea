"""The language model's text: the bytes of CPython's standard-library source, pinned by hash.

Book: "Evidence from a language model" (chapters/13_language_model.ipynb).

Every machine that runs the book has a Python, and every Python ships its standard
library as ``.py`` source (``sysconfig.get_paths()["stdlib"]``), so this corpus needs no
download. Which files, and which bytes, is pinned in ``corpus_files.json`` (written by
``pin_corpus`` on the Python named there): each file's path relative to the standard
library, its size and sha256, and the hash of the whole list. The selection is
deterministic: every ``.py`` file under the standard library, sorted by path, except
tests (``test``/``tests`` folders and ``test_*.py``), IDLE, ``site-packages``, ``lib2to3``,
``encodings`` (code tables), ``tkinter``, ``turtledemo``, ``ensurepip``, ``pydoc_data``,
``distutils``, ``unittest``, ``ctypes``, ``venv``, build configuration and any file over
150 kB (``_pydecimal.py``): about 7 MB of ordinary Python.

The split is by file (never inside a file): a file is held out when the crc32 of its
path is 0 modulo ``HELD_OUT_MODULUS``, about 1 file in 12; the rest is training text.

``load_corpus()`` reads the files of this machine and checks them against the pin. If
anything differs (another Python version, a patched or missing file) it raises a
``CorpusMismatch`` naming how many files differ and the first few, and how to go on:
``allow_other_corpus=True`` (``--allow-other-corpus`` on the command line) trains on the
pinned paths that are present, as they are here, and the corpus record (``Corpus.record``)
then carries this machine's hash and the list of differences, so a result never claims
the pinned corpus when it did not train on it.
"""
from __future__ import annotations

import hashlib
import json
import platform
import sysconfig
import zlib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Corpus", "CorpusMismatch", "PIN_FILE", "HELD_OUT_MODULUS", "stdlib_root", "select_files",
           "is_held_out", "pin_corpus", "load_pin", "load_corpus", "list_hash"]

PIN_FILE = Path(__file__).with_name("corpus_files.json")
HELD_OUT_MODULUS = 12
MAX_FILE_BYTES = 150_000
EXCLUDED_FOLDERS = frozenset({"test", "tests", "idlelib", "site-packages", "lib2to3", "encodings", "turtledemo",
                              "ensurepip", "pydoc_data", "__pycache__", "tkinter", "venv", "distutils", "unittest",
                              "ctypes"})


class CorpusMismatch(ValueError):
    """The standard library here is not the pinned one (the message names what differs)."""


def stdlib_root() -> Path:
    """This Python's standard-library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def _excluded(rel: Path) -> bool:
    folders = rel.parts[:-1]
    if any(p in EXCLUDED_FOLDERS or p.startswith("test") or p.startswith("config-") for p in folders):
        return True
    return rel.name.startswith("test_")


def select_files(root) -> list[str]:
    """The corpus's files under ``root`` (relative POSIX paths, sorted): see the module docstring."""
    root = Path(root)
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if _excluded(rel) or not p.is_file() or p.stat().st_size > MAX_FILE_BYTES:
            continue
        out.append(rel.as_posix())
    return sorted(out)


def is_held_out(path: str) -> bool:
    """Whether ``path`` (relative, POSIX) is a held-out file: crc32(path) % HELD_OUT_MODULUS == 0."""
    return zlib.crc32(path.encode()) % HELD_OUT_MODULUS == 0


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def list_hash(files: list[dict]) -> str:
    """sha256 of the list of (path, size, sha256), one per line: the corpus's one hash."""
    text = "".join(f"{f['path']}\t{f['size']}\t{f['sha256']}\n" for f in files)
    return _sha256(text.encode())


def pin_corpus(root=None, path=PIN_FILE) -> dict:
    """Write the pin of the files under ``root`` (default: this Python's standard library) to ``path``."""
    root = stdlib_root() if root is None else Path(root)
    files = []
    for rel in select_files(root):
        data = (root / rel).read_bytes()
        files.append(dict(path=rel, size=len(data), sha256=_sha256(data), held_out=is_held_out(rel)))
    pin = dict(python=platform.python_version(), implementation=platform.python_implementation(),
               total_hash=list_hash(files), held_out_modulus=HELD_OUT_MODULUS, num_files=len(files),
               total_bytes=sum(f["size"] for f in files), files=files)
    Path(path).write_text(json.dumps(pin, indent=1) + "\n")
    return pin


def load_pin(path=PIN_FILE) -> dict:
    return json.loads(Path(path).read_text())


@dataclass
class Corpus:
    """Training and held-out bytes (each a concatenation of whole files, in path order) and their record."""

    train: bytes
    held_out: bytes
    train_files: list[str]
    held_out_files: list[str]
    record: dict = field(default_factory=dict)


def load_corpus(root=None, *, allow_other_corpus: bool = False, pin_path=PIN_FILE) -> Corpus:
    """The pinned corpus read from ``root`` (default: this Python's standard library), checked.

    Raises ``CorpusMismatch`` when a pinned file is missing or its bytes differ, unless
    ``allow_other_corpus``: then the present pinned files are used as they are and the
    record says so (``matches_pin`` False, this machine's hash, the differing files).
    """
    root = stdlib_root() if root is None else Path(root)
    pin = load_pin(pin_path)
    present, differ, missing = [], [], []
    for f in pin["files"]:
        p = root / f["path"]
        if not p.is_file():
            missing.append(f["path"])
            continue
        data = p.read_bytes()
        entry = dict(path=f["path"], size=len(data), sha256=_sha256(data), held_out=is_held_out(f["path"]))
        if entry["size"] != f["size"] or entry["sha256"] != f["sha256"]:
            differ.append(f["path"])
        present.append((entry, data))
    here_hash = list_hash([e for e, _ in present])
    matches = not differ and not missing
    if not matches and not allow_other_corpus:
        parts = []
        if differ:
            parts.append(f"{len(differ)} file(s) with other bytes (first: {', '.join(differ[:5])})")
        if missing:
            parts.append(f"{len(missing)} file(s) missing (first: {', '.join(missing[:5])})")
        raise CorpusMismatch(
            f"the standard library at {root} (Python {platform.python_version()}) is not the pinned corpus "
            f"(Python {pin['python']}, {pin['num_files']} files, hash {pin['total_hash'][:16]}...): "
            f"{'; '.join(parts)}. Results would not be comparable with the committed run. To train on the "
            f"files as they are here, pass allow_other_corpus=True (--allow-other-corpus): the result then "
            f"records this corpus's hash {here_hash[:16]}... and the differences")
    train = [(e, d) for e, d in present if not e["held_out"]]
    held = [(e, d) for e, d in present if e["held_out"]]
    record = dict(pinned_python=pin["python"], pinned_hash=pin["total_hash"], python=platform.python_version(),
                  hash=here_hash, matches_pin=matches, num_files=len(present), differing_files=differ,
                  missing_files=missing, train_files=len(train), held_out_files=len(held),
                  train_bytes=sum(len(d) for _, d in train), held_out_bytes=sum(len(d) for _, d in held),
                  held_out_modulus=HELD_OUT_MODULUS)
    return Corpus(train=b"".join(d for _, d in train), held_out=b"".join(d for _, d in held),
                  train_files=[e["path"] for e, _ in train], held_out_files=[e["path"] for e, _ in held],
                  record=record)
