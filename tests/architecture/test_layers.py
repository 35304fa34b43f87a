"""The layer rules, read from the source: the library imports neither Hydra, omegaconf nor
MLflow (only stagedspec/app/ does), and analysis/ never imports the decoding engine.

Every import statement counts, function-local ones included: a lazy ``import mlflow``
inside a library function still ties the library to MLflow.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.oracles import imports, module_name

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ROOT / "stagedspec" / "app"
ENTRY_SHIMS = {ROOT / "stagedspec" / f"{name}.py" for name in ("run", "generate", "distill")}
"""``python -m stagedspec.run`` / ``generate`` / ``distill``: each imports ``main`` from its
entry point, ``stagedspec.app.<name>_entry``."""

ADAPTER_ONLY = ("hydra", "omegaconf", "mlflow")
ENGINE = tuple(
    f"stagedspec.{m}"
    for m in (
        "engine",
        "drafters",
        "models",
        "tuning",
        "training",
        "evaluation",
    )
) + ("torch", "transformers")
ANALYSIS_MAY_IMPORT = ("stagedspec.metrics.run_schema", "stagedspec.metrics.round_stats", "stagedspec.metrics.machine")
"""The library modules analysis/ may read (the run schema, the metric definitions, the CPU note), while
they stay standard-library only (``test_shared_modules_stay_standard_library_only``)."""


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def check(files: list[Path], bad) -> None:
    found = [f"{f.relative_to(ROOT)} imports {m}" for f in files for m in sorted(imports(f)) if bad(m)]
    assert not found, "\n".join(found)


def library_files() -> list[Path]:
    files = sorted(p for p in (ROOT / "stagedspec").rglob("*.py") if ADAPTERS not in p.parents)
    assert ROOT / "stagedspec" / "models" / "chat_text.py" in files
    assert ROOT / "stagedspec" / "engine" / "decoding.py" in files
    return files


def analysis_files() -> list[Path]:
    files = sorted((ROOT / "analysis").rglob("*.py"))
    assert ROOT / "analysis" / "figures.py" in files
    return files


def test_library_imports_neither_hydra_omegaconf_nor_mlflow():
    check(library_files(), lambda m: under(m, ADAPTER_ONLY))


def test_library_does_not_import_the_adapters():
    """Only the entry shims reach into stagedspec/app/ (each for its own ``main``); nothing
    in the library reads the report's package either."""
    files = [f for f in library_files() if f not in ENTRY_SHIMS]
    check(files, lambda m: under(m, ("stagedspec.app", "analysis")))
    for shim in ENTRY_SHIMS:
        entry = f"stagedspec.app.{shim.stem}_entry"
        assert imports(shim) <= {entry, f"{entry}.main"}, shim


def test_analysis_does_not_import_the_engine():
    def bad(m: str) -> bool:
        return under(m, ENGINE) or (under(m, ("stagedspec",)) and not under(m, ANALYSIS_MAY_IMPORT))

    check(analysis_files(), bad)


@pytest.mark.parametrize(
    "path",
    [
        "stagedspec/metrics/round_stats.py",
        "stagedspec/metrics/run_schema.py",
        "stagedspec/metrics/machine.py",
        "stagedspec/metrics/__init__.py",
        "stagedspec/__init__.py",
    ],
)
def test_shared_modules_stay_standard_library_only(path):
    """round_stats.py may be read by analysis/, run_schema.py is read by the tracker and the
    report (through the two ``__init__.py`` above them): none may pull in torch, pandas or
    anything else outside the standard library."""
    top = {m.split(".")[0] for m in imports(ROOT / path) if not under(m, ANALYSIS_MAY_IMPORT)}  # each other: fine
    assert top <= set(sys.stdlib_module_names) | {"__future__"}, top - set(sys.stdlib_module_names)


@pytest.mark.parametrize("path", sorted(ADAPTERS.glob("*.py")) + sorted(ENTRY_SHIMS), ids=lambda p: p.name)
def test_every_adapter_and_shim_imports(path):
    """Each entry point's module imports cleanly: a name removed from a sibling module
    (a merge that drops a helper) fails here, not at a user's first run."""
    import importlib

    importlib.import_module(module_name(path))
