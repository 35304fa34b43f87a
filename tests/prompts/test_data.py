from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stagedspec.prompts.prompt_sets import (
    HUMANEVAL_INSTRUCTION,
    MT_BENCH_CATEGORIES,
    SPEC_BENCH_CATEGORIES,
    Question,
    balanced,
    default_data_path,
    humaneval_question,
    load_prompt_set,
    load_questions,
    package_file,
    prompt_set_path,
)

ROWS = [
    {"question_id": 1, "category": "writing", "turns": ["Write a poem.", "Shorter."]},
    {"question_id": 2, "category": "math", "turns": ["What is 2+2?"]},
    {"question_id": 3, "category": "writing", "turns": ["Write a haiku."]},
    {"question_id": 4, "category": "qa", "turns": ["Who wrote Hamlet?"]},
    {"question_id": 5, "category": "writing", "turns": ["Write a limerick."]},
]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def jsonl(tmp_path) -> Path:
    return _write(tmp_path / "q.jsonl", [json.dumps(r) for r in ROWS])


def test_load_all_fields(jsonl):
    qs = load_questions(jsonl)
    assert qs[0] == Question(question_id=1, category="writing", turns=["Write a poem.", "Shorter."])
    assert [q.question_id for q in qs] == [1, 2, 3, 4, 5]


def test_filter_and_limit(jsonl):
    assert [q.question_id for q in load_questions(jsonl, categories=["writing"])] == [1, 3, 5]
    assert [q.question_id for q in load_questions(jsonl, categories=["writing", "qa"], limit=3)] == [1, 3, 4]
    assert [q.question_id for q in load_questions(jsonl, limit=2)] == [1, 2]
    assert load_questions(jsonl, limit=0) == []
    assert load_questions(jsonl, categories=["coding"]) == []


def test_balanced(jsonl):
    qs = balanced(load_questions(jsonl), per_category=1)
    assert [q.question_id for q in qs] == [1, 2, 4]
    assert [q.question_id for q in balanced(load_questions(jsonl), 2)] == [1, 2, 3, 4]


def test_unknown_category_lists_valid(jsonl):
    with pytest.raises(ValueError, match="poetry.*translation"):
        load_questions(jsonl, categories=["poetry"])


def test_bad_limit(jsonl):
    with pytest.raises(ValueError, match="-1"):
        load_questions(jsonl, limit=-1)


def test_missing_file(tmp_path):
    p = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_questions(p)


def test_blank_lines_skipped(tmp_path):
    p = _write(tmp_path / "b.jsonl", ["", json.dumps(ROWS[1]), "   "])
    assert [q.question_id for q in load_questions(p)] == [2]


@pytest.mark.parametrize(
    "bad, needle",
    [
        ('{"question_id": 9, "category": "qa", "turns": ["x"]', "bad JSON"),
        ("[1, 2]", "JSON object"),
        ('{"category": "qa", "turns": ["x"]}', "missing field 'question_id'"),
        ('{"question_id": 9, "turns": ["x"]}', "missing field 'category'"),
        ('{"question_id": 9, "category": "qa"}', "missing field 'turns'"),
        ('{"question_id": "9", "category": "qa", "turns": ["x"]}', "question_id must be an int"),
        ('{"question_id": 9, "category": 3, "turns": ["x"]}', "category must be"),
        ('{"question_id": 9, "category": "qa", "turns": "x"}', "turns must be a list"),
        ('{"question_id": 9, "category": "qa", "turns": [1]}', "turns must be a list"),
        ('{"question_id": 9, "category": "qa", "turns": []}', "non-empty"),
        ('{"question_id": 9, "category": "qa", "turns": ["  "]}', "non-empty"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad, needle):
    p = _write(tmp_path / "bad.jsonl", [json.dumps(ROWS[0]), json.dumps(ROWS[1]), bad])
    with pytest.raises(ValueError) as info:
        load_questions(p)
    msg = str(info.value)
    assert f"{p}:3" in msg and needle in msg


def test_default_data_path(monkeypatch, tmp_path):
    monkeypatch.delenv("STAGEDSPEC_DATA", raising=False)
    repo_root = Path(__file__).resolve().parents[2]
    assert default_data_path() == (repo_root.parent / "shared" / "data" / "spec_bench_dev.jsonl").resolve()
    monkeypatch.setenv("STAGEDSPEC_DATA", str(tmp_path / "x.jsonl"))
    assert default_data_path() == (tmp_path / "x.jsonl").resolve()


def test_real_dev_set():
    """The optional Spec-Bench dev file (240 questions, 13 categories) that the scripts in
    experiments/ read: a user's file, not shipped, so a fresh clone skips this test (the
    packaged sets are tested below without it)."""
    path = default_data_path()
    if not path.is_file():
        pytest.skip(
            f"the optional Spec-Bench dev file is not present ({path}; set $STAGEDSPEC_DATA to "
            "test one): this test is about that file only"
        )
    qs = load_questions(path)
    assert len(qs) == 240
    assert {q.category for q in qs} == set(SPEC_BENCH_CATEGORIES)
    assert len(SPEC_BENCH_CATEGORIES) == 13
    assert len({q.question_id for q in qs}) == 240
    assert len(balanced(qs, 2)) == 26


# ------------------------------------------------------------------ shipped prompt sets
def test_mt_bench_ships_offline():
    qs = load_prompt_set("mt_bench")
    assert len(qs) == 80 and [q.question_id for q in qs] == list(range(81, 161))
    assert {c: sum(q.category == c for q in qs) for c in MT_BENCH_CATEGORIES} == dict.fromkeys(MT_BENCH_CATEGORIES, 10)
    assert all(len(q.turns) == 2 for q in qs)
    assert qs[0].turns[0].startswith("Compose an engaging travel blog post about a recent trip to Hawaii")


def test_humaneval_ships_offline_as_one_chat_turn():
    qs = load_prompt_set("humaneval")
    assert len(qs) == 164 and [q.question_id for q in qs] == list(range(164))
    assert {q.category for q in qs} == {"coding"} and all(len(q.turns) == 1 for q in qs)
    turn = qs[0].turns[0]
    assert turn.startswith("Complete the following Python function. Reply with the code only.\n\n```python\n")
    assert "def has_close_elements(numbers: List[float], threshold: float) -> bool:" in turn and turn.endswith("```")


def test_humaneval_record():
    q = humaneval_question({"task_id": "HumanEval/12", "prompt": "def f():\n"})
    assert q == Question(12, "coding", [HUMANEVAL_INSTRUCTION.format(prompt="def f():\n")])
    with pytest.raises(ValueError, match="x.gz:3.*HumanEval/<N>.*'Other/1'"):
        humaneval_question({"task_id": "Other/1", "prompt": "def f(): pass"}, "x.gz:3")


def test_filters_in_order():
    qs = load_prompt_set("mt_bench", categories=["coding", "writing"], per_category=2, limit=3, max_turns=1)
    assert [(q.category, len(q.turns)) for q in qs] == [("writing", 1), ("writing", 1), ("coding", 1)]
    assert [q.question_id for q in load_prompt_set("humaneval", limit=2)] == [0, 1]
    with pytest.raises(ValueError, match=r"unknown categories \['qa'\] for the mt_bench prompts; valid: \['writing'"):
        load_prompt_set("mt_bench", categories=["qa"])
    with pytest.raises(ValueError, match="max_turns.*0"):
        load_prompt_set("mt_bench", max_turns=0)
    with pytest.raises(ValueError, match="unknown prompt set 'mtbench'.*'mt_bench'"):
        load_prompt_set("mtbench")


def test_path_rules(monkeypatch, jsonl):
    with pytest.raises(ValueError, match="path='/x.jsonl' given, but prompt set 'mt_bench' ships in the package"):
        prompt_set_path("mt_bench", "/x.jsonl")
    monkeypatch.delenv("STAGEDSPEC_DATA", raising=False)
    with pytest.raises(ValueError, match="'spec_bench' needs a path"):
        prompt_set_path("spec_bench")
    assert [q.question_id for q in load_prompt_set("spec_bench", jsonl, categories=["writing"])] == [1, 3, 5]
    monkeypatch.setenv("STAGEDSPEC_DATA", str(jsonl))
    assert prompt_set_path("spec_bench") == jsonl.resolve()


def test_missing_package_names_the_install_command():
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps some-dist==1.0"):
        package_file("no_such_module_stagedspec", "x.jsonl", "some-dist==1.0")


GENERIC = {
    "get",
    "make",
    "check",
    "find",
    "sort",
    "array",
    "list",
    "string",
    "strings",
    "number",
    "numbers",
    "sum",
    "count",
    "add",
    "all",
    "filter",
    "by",
    "to",
    "and",
    "one",
    "is",
    "if",
    "solve",
    "encode",
    "decode",
    "compare",
    "unique",
    "common",
    "solution",
    "words",
    "split",
    "select",
    "max",
    "min",
    "elements",
    "element",
    "of",
    "in",
    "int",
    "total",
    "match",
    "closest",
    "longest",
    "digits",
    "valid",
    # words that name no task by themselves (is_nested: brackets; is_sorted; sum_product; minPath)
    "nested",
    "sorted",
    "product",
    "path",
    "date",
}


def humaneval_concepts(code: str) -> set[frozenset[str]]:
    """The words each function name of a HumanEval prompt is made of (snake_case and camelCase),
    generic ones dropped: ``is_palindrome`` -> {palindrome}, ``greatest_common_divisor`` ->
    {greatest, divisor}."""
    out = set()
    for name in re.findall(r"def (\w+)\(", code):
        words = {w.lower() for w in re.findall(r"[A-Za-z][a-z]*", name)} - GENERIC
        if words and all(len(w) >= 3 for w in words):
            out.add(frozenset(words))
    return out


def overlapping_tasks(tasks: list[str], problems) -> list[tuple[str, str]]:
    """(task, HumanEval function) pairs where every word of the function's name occurs in the task."""
    concepts = set().union(*(humaneval_concepts(q.turns[0]) for q in problems))

    def has(task: str, word: str) -> bool:  # a word of the task starts with it: fib -> Fibonacci
        return any(t.startswith(word) for t in re.findall(r"[a-z]+", task.lower()))

    return [(t, "_".join(sorted(c))) for t in tasks for c in concepts if all(has(t, w) for w in c)]


def test_training_code_tasks_are_not_humaneval_tasks():
    """Issue 21 item 9: the prompts drafts are trained on share no task with HumanEval. The check
    is by function-name words, so it catches the 11 of the 26 tasks the list used to hold that
    are HumanEval problems (palindrome, Fibonacci, prime, greatest common divisor, vowels, ...)."""
    from stagedspec.prompts.training_prompts import CODE_TASKS

    problems = load_prompt_set("humaneval")
    old = [
        "checks whether a string is a palindrome",
        "returns the n-th Fibonacci number",
        "counts the vowels in a sentence",
        "checks whether a number is prime",
        "computes the greatest common divisor of two integers",
        "removes duplicates from a list while keeping the order",
        "returns the intersection of two lists",
    ]
    assert {t for t, _ in overlapping_tasks(old, problems)} == set(old)  # the check sees each of them
    assert overlapping_tasks(CODE_TASKS, problems) == []
    # nor a shared run of 4 words with any problem's text
    grams = {
        tuple(ws[i : i + 4])
        for q in problems
        for ws in [re.findall(r"[a-z]+", q.turns[0].lower())]
        for i in range(len(ws) - 3)
    }
    for task in CODE_TASKS:
        ws = re.findall(r"[a-z]+", task.lower())
        assert not [ws[i : i + 4] for i in range(len(ws) - 3) if tuple(ws[i : i + 4]) in grams], task
