"""The extras match the imports: `[book]` holds what the chapters import, `[test]` what the tests
import, and requirements.txt pins all of it (pyproject.toml's optional dependencies)."""
from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
from IPython.core.inputtransformer2 import TransformerManager

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PAGES = [ROOT / "intro.ipynb", *sorted((ROOT / "chapters").glob("*.ipynb"))]
# our own modules, imported by the tests and tools by name
LOCAL = {p.stem for p in [*ROOT.glob("tests/**/*.py"), *ROOT.glob("tools/*.py")]} | {"tests", "relpos_core"}
# declared because a command runs them, not because a file imports them
RUN_NOT_IMPORTED = {
    "pytest-xdist": "`pytest -n 2` (make test)",
    "nbval": "`pytest --nbval-lax`, the notebooks as tests",
    "jupyterlab": "the Jupyter server of the live-widget test (tests/live/)",
    "jupyter-book": "`jupyter-book build`, whose pages tests/browser opens",
}


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string ("relpos_core[book]" -> relpos-core)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)).lower()


def _declared(*extras: str) -> set[str]:
    names = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    for extra in extras:
        for requirement in PYPROJECT["project"]["optional-dependencies"][extra]:
            if _name(requirement) == "relpos-core":  # relpos_core[book] inside [test]
                inner = re.search(r"\[(.*)\]", requirement).group(1).split(",")
                names |= _declared(*[e.strip() for e in inner])
            else:
                names.add(_name(requirement))
    return names


def _optional(tree: ast.AST) -> set[int]:
    """Line numbers of imports inside ``try: ... except ImportError`` (optional by design)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            for inner in node.body:
                lines |= {n.lineno for n in ast.walk(inner) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return lines


def imports(source: str) -> set[str]:
    """Top-level modules a piece of Python imports unconditionally (stdlib and our own left out)."""
    tree = ast.parse(source)
    optional = _optional(tree)
    found = set()
    for node in ast.walk(tree):
        if node.lineno in optional if hasattr(node, "lineno") else False:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in LOCAL}


def notebook_imports(path: Path) -> set[str]:
    transform = TransformerManager().transform_cell  # %pip and friends become Python calls
    cells = json.loads(path.read_text())["cells"]
    return set().union(*(imports(transform("".join(c["source"]))) for c in cells if c["cell_type"] == "code"))


def file_imports(paths) -> set[str]:
    return set().union(*(imports(p.read_text()) for p in paths))


DISTRIBUTIONS = importlib.metadata.packages_distributions()


def distributions(module: str) -> set[str]:
    """The distributions that provide an importable top-level module (IPython -> ipython, yaml -> pyyaml)."""
    found = {re.sub(r"[-_.]+", "-", d).lower() for d in DISTRIBUTIONS.get(module, [])}
    assert found, f"no installed distribution provides {module!r}: install the pinned requirements"
    return found


def _missing(modules: set[str], declared: set[str]) -> dict[str, set[str]]:
    return {m: distributions(m) for m in sorted(modules) if not distributions(m) & declared}


def test_book_extra_holds_every_module_a_chapter_imports():
    modules = set().union(*(notebook_imports(p) for p in PAGES))
    assert {"torch", "IPython", "transformers"} <= modules  # the parser sees the chapters' imports
    missing = _missing(modules, _declared("book"))
    assert not missing, f"chapters import {missing}, which [book] (pyproject.toml) does not name"


def test_library_imports_are_dependencies_or_extras():
    modules = file_imports(ROOT.glob("relpos_core/**/*.py"))
    missing = _missing(modules, _declared("book", "bench"))
    assert not missing, f"relpos_core imports {missing}, named by neither its dependencies nor an extra"


def test_test_extra_holds_every_module_the_tests_import():
    modules = file_imports([*ROOT.glob("tests/**/*.py"), *ROOT.glob("tools/*.py")])
    assert {"pytest", "hypothesis", "pybtex", "playwright"} <= modules
    missing = _missing(modules, _declared("test"))
    assert not missing, f"the tests import {missing}, which [test] (pyproject.toml) does not name"


@pytest.mark.slow
@pytest.mark.parametrize("extra", ["book", "test"])
def test_every_extra_is_used(extra):
    """No stale entries: each requirement is imported (by the pages, the library or the tests) or run."""
    used_modules = set().union(*(notebook_imports(p) for p in PAGES))
    used_modules |= file_imports(ROOT.glob("relpos_core/**/*.py"))
    if extra == "test":
        used_modules |= file_imports([*ROOT.glob("tests/**/*.py"), *ROOT.glob("tools/*.py")])
    used = set().union(*(distributions(m) for m in used_modules)) | set(RUN_NOT_IMPORTED)
    for requirement in PYPROJECT["project"]["optional-dependencies"][extra]:
        name = _name(requirement)
        assert name == "relpos-core" or name in used, f"[{extra}] names {requirement!r}, which nothing uses"


def test_requirements_pin_everything_the_extras_name():
    pinned = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pinned[_name(name)] = version.strip()
    for name in _declared("book", "bench", "test") - {"relpos-core"}:
        assert name in pinned, f"requirements.txt (the book build's environment) does not pin {name}"
    assert pinned["torch"].startswith("2.13"), "the book build pins the CPU build of torch 2.13"


def test_library_torch_requirement_stays_loose():
    """Colab and GPU machines bring their own torch: the package must not replace it."""
    (torch_req,) = [r for r in PYPROJECT["project"]["dependencies"] if _name(r) == "torch"]
    assert "==" not in torch_req and "<" not in torch_req
    (widgets,) = [r for r in PYPROJECT["project"]["optional-dependencies"]["book"] if _name(r) == "ipywidgets"]
    assert ">=7.7" in widgets and "<9" in widgets, "keep Colab's ipywidgets 7.7 (see pyproject.toml)"
    (ipython,) = [r for r in PYPROJECT["project"]["optional-dependencies"]["book"] if _name(r) == "ipython"]
    assert ipython.strip() == "ipython", ("keep Colab's IPython 7.34.0 (google-colab requires it): [book] must "
                                          "not bound ipython, or the set-up cell's %pip install upgrades it")


def _colab_versions():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import colab_versions
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return colab_versions


def test_the_setup_cells_install_keeps_colabs_versions():
    """Every requirement of ``relpos_core[book]`` holds for Colab's published versions (tools/colab_versions.py)
    and for the torch floor: a bound that excludes one would make Colab's %pip install replace it."""
    from packaging.requirements import Requirement

    colab = _colab_versions()
    requirements = [*PYPROJECT["project"]["dependencies"], *PYPROJECT["project"]["optional-dependencies"]["book"]]
    for versions in (colab.COLAB, {"torch": colab.torch_floor()}):
        for text in requirements:
            requirement = Requirement(text)
            version = versions.get(_name(requirement.name))
            if version is not None:
                assert requirement.specifier.contains(version, prereleases=True), (
                    f"{text!r} (pyproject.toml) excludes {requirement.name} {version}, which Colab ships: "
                    "its %pip install would replace it")


def test_the_torch_floor_is_the_one_the_readme_states():
    colab = _colab_versions()
    floor = colab.torch_floor().rsplit(".0", 1)[0]  # 2.9.0 -> 2.9
    readme = (ROOT / "README.md").read_text()
    stated = set(re.findall(r"torch>=(\d+\.\d+)", readme))
    assert stated == {floor}, f"README states torch>={sorted(stated)}, pyproject.toml torch>={floor}"


def test_a_pip_report_names_what_the_install_would_change():
    """tools/colab_versions.changes: an upgrade of an installed package (IPython 7.34.0 by ``ipython>=8``) or a new
    package is a change; relpos_core itself is not."""
    colab = _colab_versions()
    report = {"version": "1", "install": [
        {"metadata": {"name": "relpos_core", "version": "0.1.0"}},
        {"metadata": {"name": "ipython", "version": "9.18.1"}},
        {"metadata": {"name": "Traitlets", "version": "5.14.3"}},
        {"metadata": {"name": "ipython-pygments-lexers", "version": "1.1.1"}}]}
    installed = {"IPython": "7.34.0", "traitlets": "5.7.1", "relpos-core": "0.0.1"}
    assert colab.changes(report, installed) == ["ipython 7.34.0 -> 9.18.1", "traitlets 5.7.1 -> 5.14.3",
                                                "ipython-pygments-lexers 1.1.1 (new)"]
    assert colab.changes({"version": "1", "install": report["install"][:1]}, installed) == []
    with pytest.raises(ValueError, match="installation report"):
        colab.changes({"install": []}, installed)
