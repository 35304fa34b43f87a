"""Dev and test splits (stagedspec/prompts/splits.py): disjoint, covering each packaged
set, the counts the module states, and every default preset carries the split it was
tuned on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stagedspec.prompts.prompt_sets import load_prompt_set
from stagedspec.prompts.splits import SPLITS, check_split, select, split_of

EARLIER_TUNING = {"humaneval": list(range(0, 136, 27)), "mt_bench": list(range(81, 152, 10))}
"""The problems every earlier default was tuned on (HumanEval 0, 27, ..., 135; MT-bench
81, 91, ..., 151)."""

CONF = Path(__file__).resolve().parents[2] / "conf"
"""The repository's Hydra configs (what ``stagedspec.app.plan.CONF_DIR`` names)."""

TUNED_PRESETS = ("katz", "qwen_coder_0p5b", "bypass")
"""The level presets of the default hierarchy: their settings were chosen by measurement."""


@pytest.mark.parametrize("name, counts", [("humaneval", (55, 109)), ("mt_bench", (40, 40))])
def test_splits_are_disjoint_cover_the_set_and_have_the_stated_sizes(name, counts):
    every = load_prompt_set(name)
    dev, test = select(name, every, "dev"), select(name, every, "test")
    ids = lambda qs: {q.question_id for q in qs}  # noqa: E731
    assert not ids(dev) & ids(test)
    assert ids(dev) | ids(test) == ids(every)
    assert (len(dev), len(test)) == counts
    assert select(name, every, "all") == every


def test_the_rules_by_question_id():
    assert [split_of("humaneval", n) for n in (0, 1, 2, 3, 163)] == ["dev", "test", "test", "dev", "test"]
    assert [split_of("mt_bench", n) for n in (81, 82, 159, 160)] == ["dev", "test", "dev", "test"]
    assert split_of("spec_bench", 7) == "dev"


def test_mt_bench_dev_has_five_questions_of_every_category():
    dev = select("mt_bench", load_prompt_set("mt_bench"), "dev")
    cats = {q.category for q in dev}
    assert len(cats) == 8 and all(sum(q.category == c for q in dev) == 5 for c in cats)


def test_earlier_tuning_problems_are_all_dev():
    for name, ids in EARLIER_TUNING.items():
        assert {split_of(name, n) for n in ids} == {"dev"}, name


def test_split_filter_comes_before_limit():
    assert [q.question_id for q in load_prompt_set("humaneval", split="test", limit=3)] == [1, 2, 4]
    assert [q.question_id for q in load_prompt_set("mt_bench", split="dev", limit=2)] == [81, 83]


@pytest.mark.parametrize("bad", ["train", "", None, 1])
def test_bad_split_is_one_line_naming_it_and_the_valid_ones(bad):
    with pytest.raises(ValueError) as e:
        check_split(bad)
    msg = str(e.value)
    assert "\n" not in msg and repr(bad) in msg and "['dev', 'test', 'all']" in msg
    with pytest.raises(ValueError, match="unknown split"):
        load_prompt_set("humaneval", split=bad)


def test_unknown_set_has_no_split_rule():
    with pytest.raises(ValueError, match="no split rule for prompt set 'x'.*'humaneval'"):
        split_of("x", 1)


@pytest.mark.parametrize("preset", TUNED_PRESETS)
def test_default_presets_note_the_split_they_were_tuned_on(preset):
    """Each tuned preset says which split its settings were chosen on, and the problems it
    names are in that split."""
    text = (CONF / "drafter" / f"{preset}.yaml").read_text()
    m = re.search(r"^# tuned on: (\w+) \(HumanEval ([\d, .]+) and MT-bench ([\d, .]+),", text, re.M)
    assert m, f"conf/drafter/{preset}.yaml has no '# tuned on: <split> (...)' note"
    assert m.group(1) in SPLITS
    for name, listed in (("humaneval", m.group(2)), ("mt_bench", m.group(3))):
        ids = [int(n) for n in re.findall(r"\d+", listed)]
        assert ids and {split_of(name, n) for n in ids} == {m.group(1)}
