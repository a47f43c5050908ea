"""Where a command line writes: checked before any work starts, written as results finish, never lost.

The rules every command line of relpos_core follows (``python -m relpos_core.bench``,
``python -m relpos_core.decoding --bench``, ``python -m relpos_core.lab``):

* **Nothing in the package or ``data/`` unless told to.** The default output is a new
  file under ``./relpos-results/`` in the current folder, named after the tool and the
  time. A path inside the installed ``relpos_core`` package (where the committed
  results ship) or inside a checkout's ``data/`` folder is written only when ``--out``
  names it explicitly.
* **Checked first.** Before any work: the folder must be creatable and writable, the
  path must not be a folder, and an existing file is refused unless ``--force``.
* **Written as it goes.** Every finished row (a benchmark row, a lab run) is appended at
  once to ``<out>.partial.jsonl``, one JSON object per line, so an interruption or a
  crash keeps what finished.
* **Finished, or said to be unfinished.** The result is written at the end to a temporary
  file and renamed into place (a reader never sees half a file), and the partial file
  removed. On Ctrl-C the result is written from the rows that finished, marked
  ``"complete": false``, and the command exits with status 130.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from pathlib import Path

__all__ = ["Output", "protected_folders", "default_path", "RESULTS_FOLDER", "read_partial", "read_unfinished",
           "terminate_as_interrupt"]

RESULTS_FOLDER = "relpos-results"


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _umask_mode()  # what open(path, "w") gives: 0644 under the usual umask 022
PACKAGE = Path(__file__).resolve().parent


def protected_folders() -> list[Path]:
    """Folders a command line writes into only when told to: the package, and a checkout's data/."""
    out = [PACKAGE]
    checkout = PACKAGE.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "data").is_dir():
        out.append(checkout / "data")
    return out


def default_path(tool: str, suffix: str = ".json") -> Path:
    """``./relpos-results/<tool>-<UTC time><suffix>`` (a new name each second)."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path.cwd() / RESULTS_FOLDER / f"{tool}-{stamp}{suffix}"


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


class Output:
    """One result file of a command line, with its partial file (module docstring).

    ``path``: the file (``.json``); ``explicit``: the user named it (``--out``), which is
    what allows a protected folder; ``force``: an existing file may be replaced.
    ``check()`` raises ``ValueError`` naming the problem; call it before any work.
    """

    def __init__(self, path, *, explicit: bool, force: bool = False, suffix: str = ".json"):
        self.path = Path(path)
        if self.path.name in ("", ".", "..") or str(path).endswith(os.sep):  # ".", "..", "/", "out/"
            raise ValueError(f"{str(path)!r} names a folder; give a file name such as "
                             f"{str(Path(path) / ('result' + suffix))!r}")
        self.explicit = bool(explicit)
        self.force = bool(force)
        self.suffix = suffix
        self.partial = self.path.with_name(self.path.name + ".partial.jsonl")
        self.rows_written = 0

    @classmethod
    def from_argument(cls, out: str | None, *, tool: str, force: bool = False, suffix: str = ".json") -> "Output":
        """``--out`` as given (None: the default path under ./relpos-results/)."""
        if out is None:
            return cls(default_path(tool, suffix), explicit=False, force=force, suffix=suffix)
        return cls(out, explicit=True, force=force, suffix=suffix)

    @classmethod
    def for_command_line(cls, parser, out: str | None, *, tool: str, force: bool = False,
                         suffix: str = ".json") -> "Output":
        """``--out`` of a command line, checked before any work: a bad one ends the command with
        ``parser.error`` naming ``--out`` and why (exists, protected folder, not writable, ...)."""
        try:
            return cls.from_argument(out, tool=tool, force=force, suffix=suffix).check()
        except ValueError as err:
            parser.error(f"argument --out: {err}")

    def check(self) -> "Output":
        path = self.path
        if path.is_dir():
            raise ValueError(f"{path} is a folder; give a file name such as {path / ('result' + self.suffix)}")
        if path.suffix != self.suffix:
            raise ValueError(f"must end in {self.suffix}, got {str(path)!r}")
        for folder in protected_folders():
            if _inside(path, folder) and not self.explicit:
                raise ValueError(f"{path} is inside {folder}, which holds committed results: name it with --out "
                                 f"to write there on purpose")
        if path.exists() and not self.force:
            raise ValueError(f"{path} exists: pass --force to replace it, or choose another --out")
        if self.partial.exists() and not self.force:
            raise ValueError(f"{self.partial} exists (the rows of an unfinished run): move it away, or pass --force")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".relpos-write-check-"):
                pass
        except OSError as err:
            raise ValueError(f"cannot write to {path.parent}: {err.strerror or err}") from None
        if path.exists() and not os.access(path, os.W_OK):
            raise ValueError(f"{path} exists and is not writable")
        return self

    def begin(self, head: dict) -> None:
        """Start the partial file with the run's head (provenance, settings), replacing an old one."""
        with open(self.partial, "w") as f:
            f.write(json.dumps({"head": head}, default=str) + "\n")

    def restart(self, head: dict, rows: list[dict]) -> None:
        """Resume: the partial file rewritten as ``head`` + ``rows``, beside it and renamed into place.

        Until the rename the old partial file is untouched, so an interruption or a write
        error while rewriting loses nothing (``--resume`` can run again).
        """
        fd, tmp = tempfile.mkstemp(dir=self.partial.parent, prefix=f".{self.partial.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps({"head": head}, default=str) + "\n")
                for row in rows:
                    f.write(json.dumps({"row": row}, default=str) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, _FILE_MODE)
            os.replace(tmp, self.partial)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        self.rows_written = len(rows)

    def add(self, row: dict) -> None:
        """Append one finished row to the partial file (flushed at once)."""
        with open(self.partial, "a") as f:
            f.write(json.dumps({"row": row}, default=str) + "\n")
            f.flush()
        self.rows_written += 1

    def finish(self, result: dict, *, text: str | None = None) -> Path:
        """Write the result (``text``, or ``result`` as JSON) atomically and remove the partial file."""
        body = text if text is not None else json.dumps(result, indent=1, default=str) + "\n"
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(body)
            os.chmod(tmp, _FILE_MODE)  # as any file the user writes (mkstemp makes it 0600)
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        if self.partial.exists():
            self.partial.unlink()
        return self.path

    def sibling(self, suffix: str) -> Path:
        """A file beside the result (``.html``, ``-figure.png``): checked like the result itself."""
        other = self.path.with_name(self.path.stem + suffix)
        if other.exists() and not self.force:
            raise ValueError(f"{other} exists: pass --force to replace it, or choose another --out")
        return other


def read_partial(path) -> tuple[dict | None, list[dict]]:
    """(head, rows) of a partial file: what an interrupted run had finished.

    A torn last line (the process was killed while appending it) is dropped with a
    warning naming the file; any other line that is not JSON raises ValueError naming
    the file and the line.
    """
    import warnings

    path = Path(path)
    head, rows = None, []
    lines = [(n, line) for n, line in enumerate(path.read_text().splitlines(), start=1) if line.strip()]
    for i, (n, line) in enumerate(lines):
        try:
            item = json.loads(line)
            if not isinstance(item, dict):
                raise ValueError("not a JSON object")
        except ValueError as err:
            if i == len(lines) - 1 and i > 0:
                warnings.warn(f"{path}: dropped its torn last line {n} (cut off while it was written: {err}); "
                              f"the {len(lines) - 1} line(s) before it are kept", RuntimeWarning, stacklevel=2)
                break
            raise ValueError(f"{path} line {n} is not a partial-file row ({err})") from None
        if "head" in item:
            head = item["head"]
        elif "row" in item:
            rows.append(item["row"])
    return head, rows


def terminate_as_interrupt(signum, frame):
    """A SIGTERM handler: ``kill <pid>`` ends a command as Ctrl-C does, so it keeps its finished rows."""
    raise KeyboardInterrupt


def read_unfinished(output: Output, head_of, *, missing=None) -> tuple[dict, list[dict]]:
    """(head, finished rows) of an interrupted run, for ``--resume``: its partial file, or its
    results file marked ``"complete": false`` (what Ctrl-C writes), whose head ``head_of(provenance)``
    rebuilds. A finished run is continued only when ``missing(rows)`` (the run ids its preset
    names that the rows lack: the preset grew since) is not empty; otherwise it is an error
    naming the path, as is no file at all."""
    if output.partial.is_file():
        head, rows = read_partial(output.partial)
        return head or {}, rows
    if output.path.is_file():
        old = json.loads(output.path.read_text())
        if old.get("complete") is not False:
            lacking = sorted(missing(old["runs"])) if missing is not None else []
            if not lacking:
                raise ValueError(f"--resume: {output.path} is a finished run (complete: {old.get('complete')}): "
                                 f"nothing to continue")
        return head_of(old["provenance"]), old["runs"]
    raise ValueError(f"--resume: neither {output.partial} nor {output.path} is there to continue")
