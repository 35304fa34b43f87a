"""Bad input is refused before any compute, with a message naming the bad value."""

from __future__ import annotations

import pytest

from stagedspec.drafters import KatzNgramDrafter, ModelDrafter
from stagedspec.drafters.hierarchy import BypassLevel, ModelLevel, NgramLevel, PromptLookupLevel, validate_levels
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import TreeShape
from stagedspec.models.model_loading import ModelSpec, load_model
from tests.helpers import other_small, tiny_target


def test_sampling_values_are_checked():
    with pytest.raises(ValueError, match=r"temperature.*-0\.5"):
        SamplingConfig(temperature=-0.5)
    with pytest.raises(ValueError, match=r"top_p.*1\.5"):
        SamplingConfig(temperature=1.0, top_p=1.5)
    with pytest.raises(ValueError, match=r"top_p.*0"):
        SamplingConfig(temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError, match=r"top_k.*-1"):
        SamplingConfig(top_k=-1)


@pytest.mark.parametrize("level", [NgramLevel(k=0), PromptLookupLevel(k=-2), ModelLevel(k=0)])
def test_draft_length_below_one(level):
    with pytest.raises(ValueError, match=rf"k must be an integer >= 1, got {level.k}"):
        validate_levels([level])


@pytest.mark.parametrize(
    "prices, message",
    [
        ({"explore_cold": 1}, r"prices\.explore_cold must be true or false, got 1"),
        ({"explore": True}, r"prices\.explore must be a finite number >= 0, got True"),
        ({"first_look": -1}, r"prices\.first_look must be a finite number >= 0, got -1"),
        ({"explore_warm": True}, r"unknown prices\.explore_warm; valid: \[.*'explore_cold'"),
        ({"copy_decay": 1.5}, r"prices\.copy_decay must be in \(0, 1\] \(1: no decay\), got 1\.5"),
        ({"copy_decay": 0}, r"prices\.copy_decay must be in \(0, 1\]"),
    ],
)
def test_router_prices_of_the_wrong_kind_are_refused_by_name(prices, message):
    with pytest.raises(ValueError, match=message):
        BypassLevel(route="timed", prices=prices).validate()
    BypassLevel(route="timed", prices={"explore_cold": True, "first_look": 0}).validate()  # the right kinds pass


def test_ngram_above_a_model_level_is_refused():
    with pytest.raises(ValueError, match="'ngram'.*lowest level"):
        validate_levels([ModelLevel(), NgramLevel()])


def test_malformed_tree():
    with pytest.raises(ValueError, match=r"no parent path \[1\]"):
        TreeShape.parse([[0], [1, 0]])
    with pytest.raises(ValueError, match="widths"):
        TreeShape.parse({"widths": [2, 0]})


def test_drafter_with_another_vocabulary():
    target = tiny_target()
    wrong = other_small(vocab=96)
    with pytest.raises(ValueError, match=r"'small' has vocabulary size 96 but the target has 128"):
        SpeculativeDecoder(target.model, ModelDrafter(wrong, k=2))
    with pytest.raises(ValueError, match=r"'ngram' has vocabulary size 100"):
        SpeculativeDecoder(target.model, KatzNgramDrafter(100, k=2))


def test_missing_model_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="nope"):
        load_model(ModelSpec(source="hf", path=str(missing)))


def test_prompts_refused_before_decoding():
    target = tiny_target()
    dec = SpeculativeDecoder(target.model, KatzNgramDrafter(128, k=4), SamplingConfig())
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        dec.generate([[1, 2], []], 4)
    with pytest.raises(ValueError, match=r"prompt 0 has 510 tokens.*context length 512"):
        dec.generate([[1] * 510], 4)
    with pytest.raises(ValueError, match=r"outside \[0, 128\): \[128\]"):
        dec.generate([[1, 128]], 4)
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1, got 0"):
        dec.generate([[1, 2]], 0)
    with pytest.raises(ValueError, match="prompts is empty"):
        dec.generate([], 4)
