"""Spec-Bench questions from a JSONL file: one object a line with ``question_id`` (int),
``category`` (str) and ``turns`` (non-empty list of user messages)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

SPEC_BENCH_CATEGORIES = (
    "translation",
    "summarization",
    "qa",
    "math_reasoning",
    "rag",
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
)


@dataclass
class Question:
    question_id: int
    category: str
    turns: list[str]


def default_data_path() -> Path:
    """$STAGEDSPEC_DATA, else ``<repo root>/../shared/data/spec_bench_dev.jsonl``."""
    env = os.environ.get("STAGEDSPEC_DATA")
    if env:
        return Path(env).expanduser().resolve()
    repo_root = Path(__file__).resolve().parent.parent
    return (repo_root.parent / "shared" / "data" / "spec_bench_dev.jsonl").resolve()


def _parse_line(raw: str, where: str) -> Question:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: bad JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in ("question_id", "category", "turns"):
        if key not in obj:
            raise ValueError(f"{where}: missing field {key!r}")
    qid, cat, turns = obj["question_id"], obj["category"], obj["turns"]
    if not isinstance(qid, int) or isinstance(qid, bool):
        raise ValueError(f"{where}: question_id must be an int, got {type(qid).__name__} {qid!r}")
    if not isinstance(cat, str) or not cat:
        raise ValueError(f"{where}: category must be a non-empty string, got {cat!r}")
    if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
        raise ValueError(f"{where}: turns must be a list of strings, got {turns!r:.80}")
    if not turns or not all(t.strip() for t in turns):
        raise ValueError(f"{where}: turns must be non-empty and hold no blank turn, got {turns!r:.80}")
    return Question(question_id=qid, category=cat, turns=list(turns))


def load_questions(
    path: str | os.PathLike | None = None, limit: int | None = None, categories: list[str] | None = None
) -> list[Question]:
    """Read questions in file order; keep those in ``categories`` (all when None); then the
    first ``limit`` of what is left (all when None). ``path`` None: ``default_data_path()``.
    Errors name file:line and what is wrong."""
    path = Path(path) if path is not None else default_data_path()
    if categories is not None:
        if isinstance(categories, str):
            categories = [categories]
        unknown = [c for c in categories if c not in SPEC_BENCH_CATEGORIES]
        if unknown:
            raise ValueError(f"unknown categories {unknown}; valid: {list(SPEC_BENCH_CATEGORIES)}")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"limit must be an integer >= 0 or None, got {limit!r}")
    if not path.is_file():
        raise FileNotFoundError(f"questions file not found: {str(path)!r}")
    questions: list[Question] = []
    with path.open(encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            q = _parse_line(raw, f"{path}:{lineno}")
            if categories is None or q.category in categories:
                questions.append(q)
    return questions if limit is None else questions[:limit]


def balanced(questions: list[Question], per_category: int) -> list[Question]:
    """Up to ``per_category`` questions of each category, keeping file order."""
    if not isinstance(per_category, int) or per_category < 0:
        raise ValueError(f"per_category must be an integer >= 0, got {per_category!r}")
    seen: dict[str, int] = {}
    out = []
    for q in questions:
        if seen.get(q.category, 0) < per_category:
            seen[q.category] = seen.get(q.category, 0) + 1
            out.append(q)
    return out
