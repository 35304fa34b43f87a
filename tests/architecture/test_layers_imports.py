"""The rooms of stagedspec/ and the one layer rule between them, read from the source.

``ROOMS`` lists the subpackages from the lowest layer to the highest; a module may import
its own room and the rooms below it, never one above. The entry shims at the top of the
package (``python -m stagedspec.run`` / ``generate`` / ``distill``) count as the top room.
Imports sit at the top of a module, where a reader sees its dependencies: a function-level
import is allowed only of an optional or heavy third-party library (``LAZY_ALLOWED``),
never of a project module. README.md's "Architecture" section states the same rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.oracles import imports

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stagedspec"

ROOMS = ["metrics", "prompts", "engine", "models", "search", "drafters", "training", "evaluation", "app"]
"""Lowest first: metrics (standard library) < prompts < engine (decoding) < models (loading)
< search (tree=auto) < drafters (levels, hierarchy) < training < evaluation < app (Hydra, MLflow)."""

TOP_MODULES = {"__init__": None, "run": "app", "generate": "app", "distill": "app"}
"""Modules at the top of stagedspec/ and the room each counts as (None: imports nothing)."""

LAZY_ALLOWED = ("transformers", "safetensors", "gguf", "mlflow", "hydra", "pandas", "git")
"""Libraries a function may import: optional (gguf only for GGUF files, git for run
context) or heavy to import (transformers, mlflow, pandas), needed on one path only."""


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def room_of(module: str) -> str | None:
    """The room of a dotted stagedspec module name (None for the package itself)."""
    parts = module.split(".")
    assert parts[0] == "stagedspec", module
    if len(parts) == 1:
        return None
    if parts[1] in ROOMS:
        return parts[1]
    assert parts[1] in TOP_MODULES, f"{module}: not in a room; add it to ROOMS or TOP_MODULES"
    return TOP_MODULES[parts[1]]


def file_room(path: Path) -> str | None:
    rel = path.relative_to(PACKAGE)
    if len(rel.parts) > 1:
        assert rel.parts[0] in ROOMS, f"{rel}: a subpackage not in ROOMS"
        return rel.parts[0]
    assert rel.stem in TOP_MODULES, f"{rel}: a new module at the top of stagedspec/; put it in a room"
    return TOP_MODULES[rel.stem]


def upward_imports(path: Path) -> list[str]:
    here = file_room(path)
    rank = ROOMS.index(here) if here is not None else -1
    bad = []
    for m in sorted(imports(path)):
        if m.split(".")[0] != "stagedspec":
            continue
        try:
            there = room_of(m)
        except AssertionError:  # ``from stagedspec.x import name``: the name is no module
            continue
        if there is not None and ROOMS.index(there) > rank:
            bad.append(f"{path.relative_to(ROOT)} ({here}) imports {m} ({there})")
    return bad


def function_level_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import inside a function or method."""
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if in_function and isinstance(child, ast.Import):
                out.extend((child.lineno, a.name) for a in child.names)
            elif in_function and isinstance(child, ast.ImportFrom):
                out.append((child.lineno, "." * child.level + (child.module or "")))
            visit(child, inside)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return out


def test_the_rooms_are_the_subpackages():
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert subpackages == set(ROOMS)
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top == set(TOP_MODULES) and len(top) <= 8, top


def test_no_module_stem_is_used_twice():
    stems: dict[str, list[str]] = {}
    for p in modules():
        if p.name != "__init__.py":
            stems.setdefault(p.stem, []).append(str(p.relative_to(ROOT)))
    for room in ROOMS:
        stems.setdefault(room, []).append(f"stagedspec/{room}/")
    assert not {s: ps for s, ps in stems.items() if len(ps) > 1}


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_room_imports_a_higher_room(path):
    assert not upward_imports(path)


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_function_level_imports_only_of_optional_heavy_libraries(path):
    bad = [f"{path.relative_to(ROOT)}:{line} imports {m} inside a function"
           for line, m in function_level_imports(path) if m.split(".")[0] not in LAZY_ALLOWED]
    assert not bad
