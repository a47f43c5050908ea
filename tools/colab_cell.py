"""Render every page's Colab set-up cell from the repository URL in _config.yml.

The URL is defined once, in ``_config.yml`` (``repository.url``), which also drives the
book's Colab launch buttons. Every page with a launch button (the landing page
``intro.ipynb`` and each chapter) gets the cell as its first code cell: ``--write``
rewrites it, or inserts it before the first code cell of a page that has none yet;
``--check`` (and tests/test_notebooks.py) fails if any page is out of date.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MARKER = "# Colab set-up"


def repository_url(root: Path = ROOT) -> str:
    config = yaml.safe_load((root / "_config.yml").read_text())
    url = (config.get("repository") or {}).get("url")
    if not url:
        raise ValueError("_config.yml must define repository.url")
    return url.rstrip("/")


def colab_cell_source(root: Path = ROOT) -> str:
    url = repository_url(root)
    return (
        f"{MARKER}: installs relpos_core from the repository when this notebook runs\n"
        "# in Colab; everywhere else (Jupyter, the book build, nbval) it does nothing.\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        f'    %pip install --quiet "relpos_core[book] @ git+{url}"'
    )


def chapters(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in (root / "chapters").glob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def pages(root: Path = ROOT) -> list[Path]:
    """Every notebook the book shows with a launch button: the landing page, then the chapters."""
    return [root / "intro.ipynb", *chapters(root)]


def first_code_cell(notebook: dict) -> dict | None:
    return next((c for c in notebook["cells"] if c["cell_type"] == "code"), None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the cells")
    parser.add_argument("--check", action="store_true", help="fail if a cell is out of date")
    args = parser.parse_args(argv)
    expected = colab_cell_source()
    stale = []
    for path in pages():
        notebook = json.loads(path.read_text())
        cell = first_code_cell(notebook)
        if cell is None or "".join(cell["source"]) != expected:
            stale.append(path)
            if not args.write:
                continue
            if cell is not None and "".join(cell["source"]).startswith(MARKER):
                cell["source"] = expected.splitlines(keepends=True)
            else:  # a page without the cell: insert it before its first code cell
                new = {"cell_type": "code", "execution_count": None, "id": "colab-setup",
                       "metadata": {"tags": ["remove-input"]}, "outputs": [],
                       "source": expected.splitlines(keepends=True)}
                where = notebook["cells"].index(cell) if cell is not None else len(notebook["cells"])
                notebook["cells"].insert(where, new)
            path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
            print(f"updated {path.relative_to(ROOT)}")
    if args.check and stale:
        print("stale Colab cells: " + ", ".join(str(p.relative_to(ROOT)) for p in stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
