"""Execute every page as a Colab user runs it: the installed wheel, the notebook alone.

What Colab does with a chapter: its set-up cell pip-installs ``relpos_core[book]`` from the
repository URL (a wheel: the package and its package data, no ``data/``, no ``tests/``),
and the notebook runs in a working folder that holds nothing of the repository. This
script does the same without the network (``make test`` runs it):

1. builds a wheel of relpos_core from this tree (a copy of ``pyproject.toml``,
   ``README.md`` and ``relpos_core/``, so the tree gets no build folders);
2. installs it, without dependencies, into a scratch folder (``--target``);
3. makes a scratch venv with no packages of its own: its kernel sees the wheel first
   and then the pinned packages of the project's venv through ``PYTHONPATH`` (``.pth``
   files are not read from there, so the project's editable install of relpos_core is
   invisible);
4. copies each notebook (``intro.ipynb``, ``chapters/*.ipynb``) alone into an empty
   folder and executes it with nbval (``--nbval-lax``, a cell timeout). One cell is
   appended to each copy: it moves every live slider the page made (``rp.figures.slider``)
   to each of its values after the whole page ran, as a reader does, and fails if a
   figure function no longer works then (a later cell rebound a name it reads).

An IPython start-up file in every kernel checks, before the first cell, that
``relpos_core`` is the wheel's copy, that no ``sys.path`` entry and no working folder lies
inside the repository, and hides the book build's own modules (``myst_nb``,
``jupyter_book``, ``sphinx``), which Colab does not have; a failed check ends the kernel,
so the notebook fails. It also records every line a cell writes to stderr: after nbval,
the script fails if any page wrote one (a reader would see it; the book build turns it
into an error). ``--python-path DIR`` puts DIR first on the kernel's path, e.g. the
site-packages of a venv with a CUDA build of torch, to run the pages on that build.
``--python PYTHON`` runs the kernels with another interpreter and its own packages instead
of the scratch venv and the pinned ones (a stand-in of Colab's environment built by
``tools/colab_versions.py``, which must not have relpos_core installed); pytest and nbval
then come from ``--harness DIR``, a folder put after the wheel on the kernel's path.

Usage: python tools/colab_like.py [-n WORKERS] [--keep] [--python-path DIR]
                                  [--python PYTHON --harness DIR] [NOTEBOOK ...]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK_BUILD_ONLY = ("myst_nb", "jupyter_book", "sphinx")
# The versions each kernel reports (the ones Colab's list names; tools/colab_versions.py).
REPORTED = ("torch", "transformers", "plotly", "ipywidgets", "ipython", "numpy", "ipykernel", "matplotlib")

STARTUP = r'''
# Written by tools/colab_like.py: checks that this kernel runs as in Colab.
import json, os, sys

def _fail(message):
    sys.__stderr__.write("colab-like check failed: " + message + "\n")
    sys.__stderr__.flush()
    os._exit(70)

_repo = os.path.realpath(os.environ["RELPOS_REPO_ROOT"])
_site = os.path.realpath(os.environ["RELPOS_WHEEL_SITE"])
_log = os.environ["RELPOS_COLAB_LOG"]
_packages = os.path.realpath(os.environ["RELPOS_PINNED_PACKAGES"])  # installed packages, not the tree

def _inside(path, folder):
    path = os.path.realpath(path or ".")
    return path == folder or path.startswith(folder + os.sep)

for _entry in sys.path:
    if _entry and _inside(_entry, _repo) and not _inside(_entry, _packages):
        _fail(f"sys.path holds {_entry!r}, inside the repository {_repo}")
if _inside(os.getcwd(), _repo):
    _fail(f"the working folder {os.getcwd()} is inside the repository")
if [p for p in os.listdir(".") if not p.endswith(".ipynb")]:
    _fail(f"the working folder is not empty: {sorted(os.listdir('.'))}")


class _BookBuildOnly:
    """Colab has no book-build packages: importing one fails as it would there."""
    names = set(os.environ["RELPOS_HIDDEN_MODULES"].split(","))

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by tools/colab_like.py)", name=name)
        return None


sys.meta_path.insert(0, _BookBuildOnly())

import relpos_core  # noqa: E402

if not _inside(relpos_core.__file__, _site):
    _fail(f"relpos_core comes from {relpos_core.__file__}, not from the wheel installed in {_site}")

import importlib.metadata as _metadata  # noqa: E402


def _version(name):
    try:
        return _metadata.version(name)
    except _metadata.PackageNotFoundError:
        return None


_record = {"pid": os.getpid(), "cwd": os.getcwd(), "relpos_core": relpos_core.__file__,
           "notebooks": sorted(os.listdir(".")), "stderr": [], "python": sys.version.split()[0],
           "versions": {n: _version(n) for n in os.environ["RELPOS_REPORTED_PACKAGES"].split(",")},
           "started": __import__("time").time()}


def _save():
    with open(os.path.join(_log, f"kernel-{os.getpid()}.json"), "w") as f:
        json.dump(_record, f)


_save()

# Every live slider the page makes, so the check cell at the end can move each one.
import importlib  # noqa: E402

_slider_module = importlib.import_module("relpos_core.figures.slider")
_colab_like_sliders = []
_slider_init = _slider_module.SliderFigure.__init__


def _registering_init(self, *args, _init=_slider_init, **kwargs):
    _init(self, *args, **kwargs)
    _colab_like_sliders.append(self)


_slider_module.SliderFigure.__init__ = _registering_init
_stream = sys.stderr
_write = _stream.write


def _recording_write(text, _write=_write):
    if text.strip():
        _record["stderr"].append(text)
        _save()
    return _write(text)


_stream.write = _recording_write
'''


# Appended to each copy (not to the page): a reader moves the sliders after running the page,
# when later cells may have rebound names the figure function reads.
SLIDER_CHECK = """# Added by tools/colab_like.py, not part of the page: every live slider of this page,
# moved to each of its values after the whole page ran (what a reader's move recomputes).
_colab_like_failures = []
for _slider in _colab_like_sliders:
    for _value in _slider.values:
        try:
            _slider._figure(_value)
        except Exception as _err:
            _colab_like_failures.append(f"{_slider.name} = {_value!r}: {type(_err).__name__}: {_err}")
_record["sliders"] = len(_colab_like_sliders)
_record["finished"] = __import__("time").time()
_save()
assert not _colab_like_failures, _colab_like_failures
"""


def copy_with_slider_check(source: Path, target: Path) -> None:
    notebook = json.loads(source.read_text())
    notebook["cells"].append({"cell_type": "code", "execution_count": None, "id": "colab-like-slider-check",
                              "metadata": {}, "outputs": [], "source": SLIDER_CHECK.splitlines(keepends=True)})
    target.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")


def build_wheel(scratch: Path) -> Path:
    source = scratch / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "relpos_core", source / "relpos_core",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    wheels = scratch / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(wheels), str(source)], check=True)
    (wheel,) = wheels.glob("relpos_core-*.whl")
    return wheel


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="default: intro.ipynb and chapters/*.ipynb")
    parser.add_argument("-n", "--workers", default="2", help="pytest-xdist workers (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--python-path", default=None, help="a folder put first on the kernel's path")
    parser.add_argument("--python", default=None,
                        help="the kernels' interpreter, with its own packages (default: the pinned ones)")
    parser.add_argument("--harness", default=None,
                        help="with --python: a folder holding pytest, nbval and pytest-xdist for it")
    parser.add_argument("--cell-timeout", type=int, default=300, help="seconds per cell (default 300)")
    # A kernel's start runs the start-up check above, which imports relpos_core and torch: on a
    # loaded 2-core machine with a cold disk it took over nbval's default 60 s once (every cell of
    # that page then failed at set-up), so the start gets its own, longer limit.
    parser.add_argument("--startup-timeout", type=int, default=300,
                        help="seconds for a kernel to start (default 300)")
    args = parser.parse_args(argv)
    if (args.python is None) != (args.harness is None):
        parser.error("--python and --harness go together (the interpreter and its pytest/nbval folder)")
    notebooks = [Path(p).resolve() for p in args.notebooks] or [ROOT / "intro.ipynb",
                                                                 *sorted((ROOT / "chapters").glob("*.ipynb"))]
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="relpos-colab-like-"))
    try:
        wheel = build_wheel(scratch)
        site = scratch / "site"
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                        "--disable-pip-version-check", "--target", str(site), str(wheel)], check=True)
        if args.python:  # a stand-in environment: its own interpreter and packages
            python = Path(args.python).absolute()
            pinned = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                    check=True, capture_output=True, text=True).stdout.strip()
        else:  # a scratch venv that sees the project venv's packages through PYTHONPATH
            venv.EnvBuilder(with_pip=False, clear=True).create(scratch / "venv")
            python = scratch / "venv" / "bin" / "python"
            pinned = sysconfig.get_paths()["purelib"]  # the project venv's packages
        run = scratch / "run"
        for nb in notebooks:
            folder = run / nb.stem
            folder.mkdir(parents=True)
            copy_with_slider_check(nb, folder / nb.name)
        startup = scratch / "ipython" / "profile_default" / "startup"
        startup.mkdir(parents=True)
        (startup / "00-colab-like.py").write_text(STARTUP)
        log = scratch / "kernels"
        log.mkdir()
        path = [str(site)] + ([str(Path(args.harness).resolve())] if args.harness else [pinned])
        if args.python_path:
            path.insert(0, str(Path(args.python_path).resolve()))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER"))}
        env.update(PYTHONPATH=os.pathsep.join(path), PYTHONNOUSERSITE="1", IPYTHONDIR=str(scratch / "ipython"),
                   RELPOS_REPO_ROOT=str(ROOT), RELPOS_WHEEL_SITE=str(site), RELPOS_COLAB_LOG=str(log),
                   RELPOS_PINNED_PACKAGES=pinned,
                   RELPOS_HIDDEN_MODULES=",".join(BOOK_BUILD_ONLY), RELPOS_REPORTED_PACKAGES=",".join(REPORTED),
                   HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1", MPLBACKEND="Agg",
                   PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}")
        print(f"colab-like: {wheel.name} in {site}; {len(notebooks)} notebook(s), each alone in a folder "
              f"under {run}", flush=True)
        command = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nbval-lax",
                   "--nbval-current-env", f"--nbval-cell-timeout={args.cell_timeout}",
                   f"--nbval-kernel-startup-timeout={args.startup_timeout}", "-n", args.workers,
                   "--dist", "loadfile", "--durations=5", "--rootdir", str(run), str(run)]
        status = subprocess.run(command, cwd=run, env=env).returncode
        kernels = [json.loads(p.read_text()) for p in sorted(log.glob("kernel-*.json"))]
        ran = {name for k in kernels for name in k["notebooks"]}
        missing = sorted(nb.name for nb in notebooks if nb.name not in ran)
        if missing:
            print(f"colab-like: no checked kernel ran {missing}", file=sys.stderr)
            status = status or 1
        for k in kernels:
            if k["stderr"]:
                print(f"colab-like: {k['notebooks']} wrote to stderr:\n" + "".join(k["stderr"]), file=sys.stderr)
                status = status or 1
        seen = sorted({(k["python"], json.dumps(k["versions"], sort_keys=True)) for k in kernels})
        for python_version, versions in seen:
            print(f"colab-like: kernels ran Python {python_version} with "
                  + ", ".join(f"{n} {v}" for n, v in json.loads(versions).items()))
        for k in kernels:
            took = f"{k['finished'] - k['started']:.0f} s" if "finished" in k else "did not reach its last cell"
            print(f"colab-like: {', '.join(k['notebooks'])}: {took}, {k.get('sliders', 0)} live slider(s), "
                  f"{len(k['stderr'])} stderr write(s)")
        sliders = sum(k.get("sliders", 0) for k in kernels)
        print(f"colab-like: {len(kernels)} kernel(s) checked (relpos_core from the wheel, nothing of the "
              f"repository on sys.path); {sliders} live slider(s) moved to every value after their page ran; "
              f"{time.perf_counter() - started:.0f} s in all; exit {status}")
        return status
    finally:
        if args.keep:
            print(f"colab-like: scratch kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
