"""The schema of a run: the names a sweep's runs are stored under, shared by the writer
and the readers, and the method format ("ngram>small>target"), built and parsed here.

The engine names its methods with ``method_name``, the tracker (``stagedspec/app/tracking.py``)
writes these tags and the report (``analysis/``) reads them back with ``levels_of``. Standard
library only: the tracker imports this module without pulling in the report's pandas, and
the report reads runs without importing the decoding engine.
"""

from __future__ import annotations

from collections.abc import Iterable

ROLE_TAG = "stagedspec.role"
"""``parent`` (one per sweep) or ``child`` (one per job)."""
PARENT_TAG = "mlflow.parentRunId"  # what the MLflow UI nests runs by
TARGET = "target"
"""The last name in a method, and the level that proposed the target's own tokens."""


def method_name(level_names: Iterable[str]) -> str:
    """A hierarchy's name: its draft levels, lowest first, then the target, e.g.
    "ngram>small>target"; plain decoding is "target". (``levels_of`` reads it back.)"""
    return ">".join([*level_names, TARGET])


def levels_of(method: str) -> list[str]:
    """Draft levels of a method string, bottom first: "ngram>small>target" -> [ngram, small]."""
    parts = [p.strip() for p in str(method).split(">")]
    return parts[:-1] if len(parts) > 1 else []


def top_level_of(method: str) -> str | None:
    """The draft level right below the target (the one the target verifies), or None for AR."""
    levels = levels_of(method)
    return levels[-1] if levels else None
