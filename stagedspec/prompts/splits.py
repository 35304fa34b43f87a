"""Dev and test splits, declared once: per prompt set, the questions settings may be tuned
on (``dev``) and the disjoint ones results are reported on (``test``).

Why: every default setting (the 0.5B's k <= 12 and stop_below 0.5, the bypass level's
24 / 6, int4_rows 2, stop_alternatives 2, the n-gram's min_top 0.3) was chosen on the same
problems the results reported (HumanEval 0, 27, ..., 135 and MT-bench 81, 91, ..., 151),
so those figures were in-sample. From here on a setting is tuned on ``dev`` and a result
reported on ``test``. The rules are fixed functions of the question id, chosen so that
every problem earlier tuning used falls in ``dev`` (what was tuned on is never reported
as out of sample):

- ``humaneval`` (164 problems, question_id N of "HumanEval/N"): ``dev`` = N % 3 == 0
  (55 problems, every third, spread over the set; holds 0, 27, 54, 81, 108, 135),
  ``test`` = the other 109.
- ``mt_bench`` (question ids 81..160): ``dev`` = odd ids (40 questions, 5 of each of the
  8 categories; holds 81, 91, ..., 151), ``test`` = even ids (40).
- ``spec_bench`` (a user's file, used as a tuning set): every question is ``dev``;
  ``test`` is empty.

``all`` is both splits (the behaviour before splits existed). Standard library only.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Iterable

SPLITS = ("dev", "test")
"""The two disjoint splits."""
SPLIT_CHOICES = SPLITS + ("all",)
"""What a caller may select: a split, or both (``all``)."""

DEFAULT_SPLIT = "test"
"""What results are reported on (the runner's ``data.split`` and peers' ``--split``)."""


def _humaneval_split(question_id: int) -> str:
    """Every third problem (0, 3, 6, ...) is dev."""
    return "dev" if question_id % 3 == 0 else "test"


def _mt_bench_split(question_id: int) -> str:
    """Odd question ids (81, 83, ..., 159) are dev."""
    return "dev" if question_id % 2 == 1 else "test"


def _spec_bench_split(question_id: int) -> str:
    """A Spec-Bench file is a tuning set: all of it dev."""
    return "dev"


RULES = {"humaneval": _humaneval_split, "mt_bench": _mt_bench_split, "spec_bench": _spec_bench_split}
"""Prompt set name -> the rule giving a question id's split."""


def check_split(split: Any) -> str:
    """``split`` if it is one of ``SPLIT_CHOICES``; else a one-line ValueError naming it."""
    if not isinstance(split, str) or split not in SPLIT_CHOICES:
        raise ValueError(f"unknown split {split!r}; valid: {list(SPLIT_CHOICES)}")
    return split


def _question_id(item: Any) -> int:
    """A question id from a Question (``question_id``) or the id itself."""
    qid = getattr(item, "question_id", item)
    if not isinstance(qid, int) or isinstance(qid, bool):
        raise ValueError(f"a split needs an integer question id, got {qid!r}")
    return qid


def split_of(set_name: str, item: Any) -> str:
    """``"dev"`` or ``"test"``: the split of ``item`` (a Question or its question_id) in
    the prompt set ``set_name``."""
    try:
        rule = RULES[set_name]
    except KeyError:
        raise ValueError(f"no split rule for prompt set {set_name!r}; valid: {list(RULES)}") from None
    return rule(_question_id(item))


def select(set_name: str, questions: Iterable[Any], split: str) -> list[Any]:
    """The questions of ``split`` (``all``: every one), in their order."""
    split = check_split(split)
    if split == "all":
        return list(questions)
    return [q for q in questions if split_of(set_name, q) == split]
