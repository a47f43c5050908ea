"""The library's import graph: no circles, and every import goes down the layers (or stays in one).

Every ``import`` and ``from ... import`` statement of every module counts, also those inside
functions (an import inside a function that closes a circle is still a circle: it only
hides it until run time). The layers, from the ground up, are the ones the package's
docstring (``relpos_core/__init__.py``) and CONTRIBUTING.md describe.
"""
from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "relpos_core"

# lowest first; a module may import its own layer and the layers below it
LAYERS = [
    ("ground", ["relpos_core._validate", "relpos_core.budget", "relpos_core.cli", "relpos_core.provenance",
                "relpos_core.outputs", "relpos_core.positions", "relpos_core.compile_ops", "relpos_core.resources", "relpos_core.measure._profiler",
                "relpos_core.measure.memory", "relpos_core.measure.timing"]),
    ("pieces", ["relpos_core.offsets", "relpos_core.pieces", "relpos_core.pieces.*", "relpos_core.terms"]),
    ("kernels", ["relpos_core.kernels", "relpos_core.kernels.*"]),
    ("schemes", ["relpos_core.schemes", "relpos_core.schemes.*"]),
    ("oracles", ["relpos_core.oracles", "relpos_core.oracles.*"]),
    ("registry", ["relpos_core.registry"]),
    ("measure", ["relpos_core.measure", "relpos_core.measure.*"]),
    ("attend", ["relpos_core.attend"]),
    ("model", ["relpos_core.cache", "relpos_core.layers", "relpos_core.models", "relpos_core.mla"]),
    ("applications", ["relpos_core.decoding", "relpos_core.decoding.*", "relpos_core.lab", "relpos_core.lab.*", "relpos_core.lm", "relpos_core.lm.*",
                      "relpos_core.failures", "relpos_core.figures", "relpos_core.figures.*", "relpos_core.bench",
                      "relpos_core.bench.*"]),
    ("package", ["relpos_core"]),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return MODULES.get(name, Path()).name == "__init__.py"


def imports_of(name: str) -> set[str]:
    """The relpos_core modules ``name`` imports, anywhere in its file."""
    path = MODULES[name]
    package = name if _is_package(name) else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("relpos_core"):
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from ..y import z
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("relpos_core"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    found.discard(name)
    return {m for m in found if m in MODULES}


GRAPH = {name: imports_of(name) for name in MODULES}


def layer_of(name: str) -> int:
    for i, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return i
    raise AssertionError(f"{name} is in no layer of tests/test_imports.py: put it in one")


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the graph's strongly connected components."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_analysis_sees_imports_inside_functions():
    assert "relpos_core.kernels.rotary" in GRAPH["relpos_core.cache"]  # imported inside KVCache._rerotate


def test_no_import_circle():
    circles = [c for c in strongly_connected(GRAPH) if len(c) > 1]
    assert not circles, f"import circles: {circles}"


def test_the_circle_check_finds_a_circle():
    assert [c for c in strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) if len(c) > 1] == \
        [["a", "b", "c"]]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_down_the_layers(name):
    mine = layer_of(name)
    up = sorted(m for m in GRAPH[name] if layer_of(m) > mine)
    assert not up, f"{name} ({LAYERS[mine][0]}) imports from a higher layer: " + ", ".join(
        f"{m} ({LAYERS[layer_of(m)][0]})" for m in up)
