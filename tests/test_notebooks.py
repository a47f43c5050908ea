"""Notebook hygiene: what every chapter must satisfy before nbval even runs it."""
import ast
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import colab_cell  # noqa: E402

CHAPTERS = colab_cell.chapters(ROOT)
PAGES = colab_cell.pages(ROOT)  # every page with a launch button: the landing page and the chapters


def load(path):
    return json.loads(path.read_text())


def code_cells(path):
    return [c for c in load(path)["cells"] if c["cell_type"] == "code"]


def python_source(cell):
    # drop IPython magics (the Colab cell's %pip) before parsing as Python
    return "\n".join(line for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith(("%", "!")))


def test_there_are_chapters():
    assert CHAPTERS, "no notebooks under chapters/"


def toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = []
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return toc["root"], files


def test_toc_lists_every_chapter_and_nothing_missing():
    root, files = toc_files()
    assert (ROOT / f"{root}.md").is_file() or (ROOT / f"{root}.ipynb").is_file()
    listed = {f"{f}.ipynb" for f in files if f.startswith("chapters/")}
    present = {str(p.relative_to(ROOT)) for p in CHAPTERS}
    assert listed == present
    pages = [f for f in files if not f.startswith("chapters/")]  # e.g. the bibliography
    assert all((ROOT / f"{f}.md").is_file() for f in pages), pages


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    for cell in code_cells(path):
        assert not cell.get("outputs"), f"{path.name}: a code cell has stored outputs; strip them before committing"
        assert cell.get("execution_count") is None, f"{path.name}: a code cell has an execution count"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_first_code_cell_is_the_colab_setup_from_config(path):
    first = code_cells(path)[0]
    assert "".join(first["source"]) == colab_cell.colab_cell_source(ROOT), (
        f"{path.name}: first code cell is not the Colab set-up cell rendered from _config.yml; run 'make colab-cells'"
    )


def test_colab_setup_installs_the_book_extra_from_the_repository():
    source = colab_cell.colab_cell_source(ROOT)
    assert f'%pip install --quiet "relpos_core[book] @ git+{colab_cell.repository_url(ROOT)}"' in source
    assert 'if "google.colab" in sys.modules:' in source  # does nothing outside Colab


def test_repository_url_is_defined_once():
    url = colab_cell.repository_url(ROOT)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["launch_buttons"]["colab_url"].startswith("https://colab.research.google.com")
    for path in CHAPTERS:  # chapters only carry it inside the rendered Colab cell
        rest = "".join("".join(c["source"]) for c in load(path)["cells"][1:] if c is not code_cells(path)[0])
        assert url not in rest.replace(colab_cell.colab_cell_source(ROOT), ""), f"{path.name} repeats the repository URL"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_imports_relpos_core_under_one_alias(path):
    aliases = set()
    for cell in code_cells(path)[1:]:
        for node in ast.walk(ast.parse(python_source(cell))):
            if isinstance(node, ast.Import):
                aliases |= {a.asname or a.name for a in node.names if a.name.split(".")[0] == "relpos_core"}
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "relpos_core":
                aliases.add(f"from {node.module} import ...")
    assert aliases == {"rp"}, f"{path.name}: import relpos_core only as 'import relpos_core as rp', found {aliases}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_checks_its_claims(path):
    asserts = sum(len(re.findall(r"^\s*(assert |torch\.testing\.assert_close)", "".join(c["source"]), re.M)) for c in code_cells(path))
    assert asserts >= 5, f"{path.name}: only {asserts} asserts; every number the prose states needs one"
