"""The one-prompt CLI (python -m stagedspec.generate) on tiny models."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from stagedspec.app.generate import generate_one
from stagedspec.app.plan import CONF_DIR, ConfigError


def _cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="generate", overrides=["target=tiny", "max_new_tokens=16", *overrides])


def test_generate_one_prompt_equals_plain_decoding():
    spec = _cfg("prompt=hello hello hello", "levels.small.model.layers=1", "levels.ngram.k=3")
    plain = _cfg("prompt=hello hello hello", "levels.ngram=null", "levels.small=null")
    out, ref = generate_one(spec), generate_one(plain)
    assert out["method"] == "ngram>small>target" and ref["method"] == "target"
    seq, ref_seq = out["result"].sequences[0], ref["result"].sequences[0]
    assert len(seq.output_ids) == 16
    assert seq.output_ids == ref_seq.output_ids  # greedy: exact
    assert out["text"] == ref["text"]
    assert len(seq.rounds) < len(ref_seq.rounds)  # drafts were accepted


def test_generate_refuses_missing_or_empty_prompt():
    with pytest.raises(ConfigError, match="prompt must be non-empty"):
        generate_one(_cfg())
    with pytest.raises(ConfigError, match="prompt must be non-empty"):
        generate_one(_cfg("prompt=' '"))


def test_generate_refuses_unknown_keys_before_loading():
    with pytest.raises(ConfigError, match="did you mean 'levels.ngram.k'"):
        generate_one(_cfg("prompt=hi", "+level.ngram.k=2"))
