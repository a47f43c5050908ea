"""Every page run in a stand-in of Colab's own environment (its published versions).

``tools/colab_like.py`` runs the pages with the project's pins (plotly 7, ipywidgets 8,
IPython 9). Colab ships older ones, and its set-up cell must not replace them. This script:

1. builds a venv under ``--venvs`` (default ``~/.cache/relpos/colab-venvs``) from a Python 3.13 interpreter
   (``--python``; else ``python3.13`` on the PATH or a pyenv 3.13), with Colab's pip and the
   versions Colab's package list names (``COLAB``), and ``--torch`` (default Colab's; ``floor``:
   the oldest torch ``pyproject.toml`` accepts). Colab's other packages are not pinned: the
   resolver picks them under these pins (a stand-in, not a copy of Colab's image);
2. runs the set-up cell's own ``%pip install`` requirement (read from ``tools/colab_cell.py``,
   with a wheel built from this tree in place of the repository URL) through that pip with
   ``--dry-run --report``, and fails if it would install or change anything but relpos_core;
3. puts pytest, nbval and pytest-xdist into a folder of their own (``--target``, no
   dependencies), so the stand-in's packages stay as built;
4. runs every page (or the ones named) with ``tools/colab_like.py --python`` in that venv:
   each notebook alone, with the wheel, failing on any error or any line on stderr.

Downloads: torch from PyPI is a CUDA build with several GB of NVIDIA libraries (they load
without a GPU, as on Colab's CPU runtime); the venv is kept and reused (``--rebuild`` makes it
again). Not part of ``make test``: ``make colab-versions`` runs it for Colab's torch and the floor.

Usage: python tools/colab_versions.py [--torch VERSION|colab|floor] [--python PYTHON]
                                      [--venvs DIR] [--rebuild] [--check-only] [-n WORKERS]
                                      [NOTEBOOK ...]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import colab_cell  # noqa: E402
import colab_like  # noqa: E402

# Colab's published package list of 2026-08 (the versions issue 25 names): Python 3.13, pip 24.1.2.
COLAB_PYTHON = "3.13"
COLAB_PIP = "24.1.2"
COLAB = {
    "torch": "2.11.0",
    "transformers": "5.15.0",
    "plotly": "5.24.1",
    "ipywidgets": "7.7.1",
    "ipython": "7.34.0",
    "numpy": "2.1.3",
    "ipykernel": "6.17.1",
}
# Colab has these too (the pages import matplotlib; nbval reads notebooks with nbformat); their
# versions are left to the resolver under the pins above.
COLAB_UNPINNED = ("matplotlib", "nbformat")
# The test harness, kept out of the stand-in: installed with --no-deps into a folder of its own.
HARNESS = ("pytest", "pluggy", "iniconfig", "nbval", "pytest-xdist", "execnet", "coverage")


def torch_floor(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The oldest torch ``pyproject.toml`` accepts, as a version (``torch>=2.9`` -> ``2.9.0``)."""
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    (spec,) = [d for d in dependencies if re.match(r"torch\b", d)]
    match = re.fullmatch(r"torch\s*>=\s*(\d+)\.(\d+)(?:\.(\d+))?", spec)
    if not match:
        raise ValueError(f"pyproject.toml's torch requirement must be 'torch>=X.Y', got {spec!r}")
    major, minor, patch = match.groups()
    return f"{major}.{minor}.{patch or 0}"


def setup_cell_requirement(wheel: Path) -> str:
    """The requirement the set-up cell's ``%pip install`` names, with the wheel for the repository URL."""
    (requirement,) = re.findall(r'%pip install --quiet "([^"]+)"', colab_cell.colab_cell_source())
    name, url = requirement.split(" @ ")
    if not url.startswith("git+"):
        raise ValueError(f"the set-up cell installs {requirement!r}, not from a git+ URL")
    return f"{name} @ {wheel.as_uri()}"


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def changes(report: dict, installed: dict[str, str], allowed: tuple[str, ...] = ("relpos-core",)) -> list[str]:
    """What a ``pip install --dry-run --report`` would do beyond installing ``allowed``.

    ``installed``: name -> version of the environment before the install. Returns one line
    per package pip would install other than ``allowed``: a change of an installed one
    ("ipython 7.34.0 -> 9.18.1") or a package the environment did not have.
    """
    if report.get("version") != "1" or not isinstance(report.get("install"), list):
        raise ValueError(f"not a pip installation report (version 1): keys {sorted(report)}")
    found = []
    installed = {normal(n): v for n, v in installed.items()}
    for item in report["install"]:
        name, version = normal(item["metadata"]["name"]), item["metadata"]["version"]
        if name in allowed:
            continue
        before = installed.get(name)
        found.append(f"{name} {before} -> {version}" if before else f"{name} {version} (new)")
    return found


def pip(venv: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args],
                          check=True, env=env, **kwargs)


def installed_versions(venv: Path) -> dict[str, str]:
    out = pip(venv, "list", "--format=json", capture_output=True, text=True).stdout
    return {normal(p["name"]): p["version"] for p in json.loads(out)}


def find_python(given: str | None) -> str:
    """A Python 3.13 interpreter: ``given``, ``python3.13`` on the PATH, or a pyenv 3.13.x."""
    candidates = [given] if given else [shutil.which("python3.13"),
                                        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.13*/bin/python3.13")))]
    for python in filter(None, candidates):
        version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True).stdout.strip()
        if version == COLAB_PYTHON or given:
            if version != COLAB_PYTHON:
                print(f"colab-versions: {python} is Python {version}, not Colab's {COLAB_PYTHON}", flush=True)
            return python
    raise SystemExit(f"colab-versions: no Python {COLAB_PYTHON} found (python3.13 on the PATH, ~/.pyenv/versions/3.13*):"
                     f" install one or pass --python (the run then says it is not Colab's {COLAB_PYTHON})")


def build_venv(python: str, venv: Path, torch: str, wheelhouse: Path) -> dict[str, str]:
    """Colab's pip and versions (torch: ``torch``) in a new venv; returns what it holds.

    The wheels are downloaded into ``wheelhouse`` first (pip skips those already there) and
    installed from it alone, so a second stand-in downloads only what the first lacked."""
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip(venv, "install", "--quiet", f"pip=={COLAB_PIP}")
    pins = {**COLAB, "torch": torch}
    wanted = [*(f"{n}=={v}" for n, v in pins.items()), *COLAB_UNPINNED]
    pip(venv, "download", "--quiet", "--only-binary=:all:", "-d", str(wheelhouse), *wanted)
    pip(venv, "install", "--quiet", "--no-index", "--find-links", str(wheelhouse), *wanted)
    versions = installed_versions(venv)
    wrong = {n: versions.get(n) for n, v in {**pins, "pip": COLAB_PIP}.items() if versions.get(n, "").split("+")[0] != v}
    if wrong:
        raise SystemExit(f"colab-versions: the venv does not hold the pinned versions: {wrong}")
    if "relpos-core" in versions:
        raise SystemExit("colab-versions: relpos_core is installed in the stand-in; the check installs its own wheel")
    (venv / "colab-standin.json").write_text(json.dumps({"pins": pins, "pip": COLAB_PIP, "installed": versions},
                                                        indent=1) + "\n")
    return versions


def check_setup_install(venv: Path, versions: dict[str, str], scratch: Path) -> list[str]:
    """The set-up cell's install, resolved by the stand-in's pip (dry run): what it would change."""
    wheel = colab_like.build_wheel(scratch)
    requirement = setup_cell_requirement(wheel)
    report = scratch / "pip-report.json"
    pip(venv, "install", "--quiet", "--dry-run", "--report", str(report), requirement)
    found = changes(json.loads(report.read_text()), versions)
    print(f"colab-versions: the set-up cell's install ({requirement.split(' @ ')[0]}) with pip {COLAB_PIP}: "
          + ("; ".join(found) if found else "relpos_core alone, none of the stand-in's packages changed"), flush=True)
    return found


def build_harness(venv: Path, harness: Path) -> None:
    if not harness.exists():
        pip(venv, "install", "--quiet", "--no-deps", "--target", str(harness), *HARNESS)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="default: every page")
    parser.add_argument("--torch", default="colab", help="a version, 'colab' (default: Colab's) or 'floor'")
    parser.add_argument("--python", default=None, help=f"the interpreter (default: a Python {COLAB_PYTHON})")
    parser.add_argument("--venvs", default=os.path.expanduser("~/.cache/relpos/colab-venvs"),
                        help="where the stand-in venvs and their wheels live (default ~/.cache/relpos/colab-venvs)")
    parser.add_argument("--rebuild", action="store_true", help="build the venv again")
    parser.add_argument("--check-only", action="store_true", help="check the set-up cell's install, run no page")
    parser.add_argument("-n", "--workers", default="2", help="notebooks at a time (default 2)")
    args = parser.parse_args(argv)
    torch = {"colab": COLAB["torch"], "floor": torch_floor()}.get(args.torch, args.torch)
    if not re.fullmatch(r"\d+\.\d+\.\d+", torch):
        parser.error(f"--torch must be 'colab', 'floor' or a version X.Y.Z, got {args.torch!r}")
    started = time.perf_counter()
    python = find_python(args.python)
    venvs = Path(args.venvs).resolve()
    if venvs == ROOT or ROOT in venvs.parents:
        parser.error(f"--venvs must lie outside the repository, got {venvs}")
    venv = venvs / f"colab-py{COLAB_PYTHON}-torch{torch}"
    stamp = venv / "colab-standin.json"
    if args.rebuild or not stamp.exists():
        print(f"colab-versions: building {venv} ({python}, pip {COLAB_PIP}, torch {torch}, "
              + ", ".join(f"{n} {v}" for n, v in COLAB.items() if n != "torch") + ")", flush=True)
        versions = build_venv(python, venv, torch, venvs / "wheelhouse")
    else:
        versions = json.loads(stamp.read_text())["installed"]
        now = installed_versions(venv)
        if now != versions:
            raise SystemExit(f"colab-versions: {venv} changed since it was built (run with --rebuild): "
                             f"{sorted(set(now.items()) ^ set(versions.items()))}")
    python_version = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print(sys.version.split()[0])"],
                                    check=True, capture_output=True, text=True).stdout.strip()
    print(f"colab-versions: stand-in {venv}: Python {python_version}; "
          + ", ".join(f"{n} {versions.get(n)}" for n in ("pip", *COLAB, *COLAB_UNPINNED)), flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="relpos-colab-versions-"))
    try:
        if check_setup_install(venv, versions, scratch):
            print("colab-versions: the set-up cell would change Colab's packages (above): fix [book] in pyproject.toml",
                  file=sys.stderr)
            return 1
        if args.check_only:
            return 0
        harness = venvs / f"colab-harness-py{COLAB_PYTHON}"
        build_harness(venv, harness)
        status = colab_like.main(["--python", str(venv / "bin" / "python"), "--harness", str(harness),
                                  "-n", args.workers, *args.notebooks])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"colab-versions: torch {torch}: exit {status}, {time.perf_counter() - started:.0f} s in all")
    return status


if __name__ == "__main__":
    sys.exit(main())
