"""The rooms of stagedspec/ and the one layer rule between them, read from the source.

``ROOMS`` lists the subpackages from the lowest layer to the highest; a module may import
its own room and the rooms below it, never one above. The entry shims at the top of the
package (``python -m stagedspec.run`` / ``generate`` / ``distill``) count as the top room.
Imports sit at the top of a module, where a reader sees its dependencies: a function-level
import is allowed only of an optional or heavy third-party library (``LAZY_ALLOWED``),
never of a project module. README.md's "Architecture" section states the same rule.

The tests follow the rooms: a test file sits in ``tests/<room>/`` and imports only that
room and the rooms below it, plus the shared oracles and builders (``tests/oracles.py``,
``tests/helpers.py``); never another test file, never a private (underscore) name of the
package (``test_tests_follow_the_rooms``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.oracles import imports

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stagedspec"

ROOMS = ["metrics", "prompts", "engine", "models", "drafters", "tuning", "training", "evaluation", "app"]
"""Lowest first: metrics (standard library) < prompts < engine (decoding) < models (loading
only) < drafters (levels, hierarchy) < tuning (measure this machine and choose: the kernel
plan's calibration, tree=auto, the disk cache) < training < evaluation (a job's assembly,
which calls tuning before timing) < app (Hydra, MLflow). Tuning sits above the engine and
the drafters, so neither can reach it: only an assembly above it calls it."""

TOP_MODULES = {"__init__": None, "run": "app", "generate": "app", "distill": "app"}
"""Modules at the top of stagedspec/ and the room each counts as (None: imports nothing)."""

LAZY_ALLOWED = ("transformers", "safetensors", "gguf", "mlflow", "hydra", "pandas", "git", "llama_cpp")
"""Libraries a function may import: optional (gguf only for GGUF files, git for run
context, llama_cpp for target.backend=llama_cpp) or heavy to import (transformers, mlflow, pandas), needed on one path only."""


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
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {m} inside a function"
        for line, m in function_level_imports(path)
        if m.split(".")[0] not in LAZY_ALLOWED
    ]
    assert not bad


# ---------------------------------------------------------------------------- the tests' rooms
TESTS = ROOT / "tests"
TEST_FOLDERS = {"analysis": "metrics", "architecture": None}
"""Folders of tests/ that are no room of the package, and the highest room their tests may
import: analysis/'s tests what analysis/ may read (``stagedspec.metrics``); the architecture
tests read every module's source (None: any room). Every other folder is a name in ``ROOMS``."""
SHARED = ("tests.oracles", "tests.helpers", "tests.conftest")
"""What a test file may import from tests/: the shared oracles and the tiny-model builders."""
PRIVATE_PENDING: dict[str, str] = {}
"""Private names tests still import, each waiting for a public name in the package; the
entry goes when the name does (``test_private_names_pending_a_public_one_are_still_imported``)."""


def files_under_tests() -> list[Path]:
    """Every Python file under tests/."""
    files = sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)
    assert TESTS / "oracles.py" in files and TESTS / "engine" / "test_greedy_exact.py" in files
    return files


def private(module: str) -> str | None:
    """The first private (single-underscore) name in a dotted stagedspec name, if any."""
    return next((p for p in module.split(".")[1:] if p.startswith("_") and not p.startswith("__")), None)


def under_any(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def rule_breaks(path: Path, source: str | None = None) -> list[str]:
    """Where ``path`` (a file under tests/) breaks the tests' rule: a test file outside a
    room's folder, or importing a room above its folder's; any file importing a test file,
    a tests/ module other than the shared ones, or a private name of the package."""
    rel, shown = path.relative_to(TESTS), path.relative_to(ROOT)
    folder = rel.parts[0] if len(rel.parts) > 1 else None
    is_test = path.name.startswith("test_")
    bad: list[str] = []
    limit = None  # the highest room this file may import (None: any)
    if folder in ROOMS:
        limit = folder
    elif folder in TEST_FOLDERS:
        limit = TEST_FOLDERS[folder]
    elif folder is not None:
        bad.append(f"{shown}: tests/{folder}/ is no room in ROOMS nor a folder in TEST_FOLDERS")
    elif is_test:
        bad.append(f"{shown}: a test file outside the rooms' folders; move it to tests/<room>/")
    flagged: list[str] = []  # a module already reported: its names are not reported again
    for m in sorted(imports(path, source)):
        if under_any(m, tuple(flagged)):
            continue
        parts, before = m.split("."), len(bad)
        if parts[0] == "tests":
            if any(p.startswith("test_") for p in parts):
                bad.append(f"{shown} imports the test file {m}: share what it needs through tests/oracles.py")
            elif not (
                m == "tests" or (len(parts) == 2 and parts[1] in {*ROOMS, *TEST_FOLDERS}) or under_any(m, SHARED)
            ):
                bad.append(f"{shown} imports {m}: tests share only {', '.join(SHARED)}")
        elif parts[0] == "stagedspec":
            name = private(m)
            if name is not None and name not in PRIVATE_PENDING:
                bad.append(
                    f"{shown} imports the private name {m}: test through the public API, or list it for a public name"
                )
            try:
                there = room_of(m)
            except AssertionError:  # ``from stagedspec.x import name``: the name is no module
                there = None
            if is_test and limit is not None and there is not None and ROOMS.index(there) > ROOMS.index(limit):
                bad.append(
                    f"{shown} (tests/{folder}/, room {limit}) imports {m} ({there}): move the file to "
                    f"tests/{there}/ or test through {limit}"
                )
        if len(bad) > before:
            flagged.append(m)
    return bad


def test_tests_follow_the_rooms():
    bad = [line for path in files_under_tests() for line in rule_breaks(path)]
    assert not bad, "\n".join(bad)


def test_private_names_pending_a_public_one_are_still_imported():
    used = {private(m) for path in files_under_tests() for m in imports(path) if m.split(".")[0] == "stagedspec"}
    assert set(PRIVATE_PENDING) <= used, f"renamed: drop {set(PRIVATE_PENDING) - used} from PRIVATE_PENDING"


def test_the_tests_rule_can_fail():
    """The check finds each kind of break in a made-up file, once, and nothing in a fine one."""
    cases = [
        (
            "engine/test_fine.py",
            "from stagedspec.engine.tree import chain\nfrom tests.oracles import hf_greedy\n"
            "from tests.helpers import tiny_target\nfrom stagedspec.metrics import cost_model\n",
            None,
        ),
        (
            "engine/test_x.py",
            "from .test_greedy_exact import N_NEW\n",
            "imports the test file tests.engine.test_greedy_exact:",
        ),
        (
            "engine/test_x.py",
            "from tests.drafters import test_trees\n",
            "imports the test file tests.drafters.test_trees:",
        ),
        (
            "engine/test_x.py",
            "def f():\n    from stagedspec.drafters import ModelDrafter\n",
            "imports stagedspec.drafters (drafters): move the file to tests/drafters/",
        ),
        ("engine/test_x.py", "from stagedspec.engine.kernels import _packed_gqa_attention\n", "the private name"),
        (
            "analysis/test_x.py",
            "from stagedspec.engine import kernels\n",
            "room metrics) imports stagedspec.engine (engine)",
        ),
        ("test_x.py", "import torch\n", "a test file outside the rooms' folders"),
        ("nowhere/test_x.py", "import torch\n", "tests/nowhere/ is no room"),
        ("oracles.py", "from tests.engine.test_logits import x\n", "imports the test file tests.engine.test_logits:"),
        ("engine/test_x.py", "from tests.engine import shared_bits\n", "tests share only"),
    ]
    for where, source, expected in cases:
        bad = rule_breaks(TESTS / where, source)
        assert bad == [] if expected is None else (len(bad) == 1 and expected in bad[0]), (where, source, bad)
