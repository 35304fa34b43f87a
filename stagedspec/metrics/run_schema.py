"""The names a sweep's runs are stored under, shared by the writer and the readers.

The tracker (``stagedspec/app/tracking.py``) writes these tags and the report reads them
back; a method is named by its draft levels, lowest first, then the target:
"ngram>small>target" (``stagedspec.stats.method_name`` builds it). Standard library
only: the tracker imports this module without pulling in the report's pandas, and the
report reads runs without importing the decoding engine.
"""

from __future__ import annotations

ROLE_TAG = "stagedspec.role"
"""``parent`` (one per sweep) or ``child`` (one per job)."""
PARENT_TAG = "mlflow.parentRunId"  # what the MLflow UI nests runs by
TARGET = "target"
"""The last name in a method, and the level that proposed the target's own tokens."""


def levels_of(method: str) -> list[str]:
    """Draft levels of a method string, bottom first: "ngram>small>target" -> [ngram, small]."""
    parts = [p.strip() for p in str(method).split(">")]
    return parts[:-1] if len(parts) > 1 else []


def top_level_of(method: str) -> str | None:
    """The draft level right below the target (the one the target verifies), or None for AR."""
    levels = levels_of(method)
    return levels[-1] if levels else None
