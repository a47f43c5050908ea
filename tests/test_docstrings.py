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


# "chapter 7", "chapters 2 to 6", "Chapter 6b": the built book renumbers chapters when one
# is inserted (the chapter files carry the book numbers since issue 22). Outside the book a chapter is named by its file
# (chapters/08_the_kv_cache.ipynb) or its title ("The KV cache").
TYPED_CHAPTER = re.compile(r"\b(?:chapters?|chap\.|ch\.)\s+\d+[a-z]?\b", re.I)
# relpos_core/lab is rewritten with chapters 10 and 11 on another branch
OUTSIDE_THE_BOOK = sorted(
    [p for p in (ROOT / "relpos_core").rglob("*.py")]
    + [p for p in (ROOT / "tools").rglob("*") if p.is_file() and p.suffix in (".py", ".sh", ".md")]
    + [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "relpos_core" / "data" / "README.md"])


def typed_chapters(path: Path) -> list[str]:
    text = path.read_text()
    return [text[max(0, m.start() - 30):m.end() + 10].replace("\n", " ") for m in TYPED_CHAPTER.finditer(text)]


def test_typed_chapters_are_found():
    assert TYPED_CHAPTER.findall("chapter 7, Chapters 2 to 6, chapter 6b's") == ["chapter 7", "Chapters 2", "chapter 6b"]
    assert not TYPED_CHAPTER.findall('"The KV cache" (chapters/08_the_kv_cache.ipynb), chapter=None')


@pytest.mark.parametrize(
    "path", OUTSIDE_THE_BOOK,
    ids=lambda p: p.relative_to(ROOT).as_posix())
def test_library_and_tools_name_chapters_by_file_or_title(path):
    found = typed_chapters(path)
    assert not found, f"{path.relative_to(ROOT)}: a chapter named by number (name its file or title): {found[:3]}"
