"""The one-prompt CLI (python -m stagedspec.generate) on tiny models."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from stagedspec.app.generate_entry import generate_one, report
from stagedspec.app.plan import CONF_DIR, ConfigError


def _cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="generate", overrides=["experiment=tiny", "max_new_tokens=16", *overrides])


def test_generate_one_prompt_equals_plain_decoding():
    spec = _cfg(
        "prompt=hello hello hello",
        "drafter@levels.ngram=katz",
        "drafter@levels.small=truncated",
        "levels.small.model.layers=1",
        "levels.ngram.k=3",
    )
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


def test_generate_prints_the_plain_comparison_and_a_column_per_level():
    out = generate_one(
        _cfg(
            "prompt=hello hello hello",
            "drafter@levels.ngram=katz",
            "drafter@levels.small=truncated",
            "levels.small.model.layers=1",
            "levels.ngram.k=3",
        )
    )
    assert out["plain_result"].sequences[0].output_ids == out["result"].sequences[0].output_ids
    text = report(out)
    assert "--- plain decoding: 16 tokens in 16 target calls" in text and "speedup" in text
    assert "outputs identical (greedy: must be)" in text
    header = next(line for line in text.splitlines() if line.lstrip().startswith("call"))
    assert header.split() == ["call", "ngram", "d/a", "small", "d/a", "emitted", "ms"]
    rows = [
        line.split() for line in text.splitlines()[text.splitlines().index(header) + 1 :] if line[:4].strip().isdigit()
    ]
    assert len(rows) == len(out["result"].sequences[0].rounds)
    r = out["result"].sequences[0].rounds[0]
    assert rows[0][1:3] == [
        f"{r.drafted.get('ngram', 0)}/{r.accepted.get('ngram', 0)}",
        f"{r.drafted.get('small', 0)}/{r.accepted.get('small', 0)}",
    ]


def test_generate_refuses_unknown_keys_before_loading():
    with pytest.raises(ConfigError, match="did you mean 'levels.ngram.k'"):
        generate_one(_cfg("prompt=hi", "+level.ngram.k=2"))


@pytest.mark.parametrize(
    "entry, first_line",
    [
        ("stagedspec.run", "python -m stagedspec.run [-m] [key=value ...]"),
        ("stagedspec.generate", 'python -m stagedspec.generate prompt="..." [key=value ...]'),
    ],
)
def test_help_pages_are_written_for_this_tool(entry, first_line):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", entry, "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.splitlines()[0] == first_line
    assert "data: humaneval, mt_bench, spec_bench" in p.stdout and "Examples" in p.stdout
    assert "powered by Hydra" not in p.stdout


def test_generate_command_line_error_is_one_line(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    p = subprocess.run(
        [sys.executable, "-m", "stagedspec.generate", "prompt=hi", "+level.ngram.k=2", f"hydra.run.dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode != 0
    assert p.stderr.strip() == (
        "error: unknown config key 'level.ngram.k': 'level' is not a key at the top level; "
        "did you mean 'levels.ngram.k'?"
    )
