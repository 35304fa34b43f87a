"""The llama.cpp peer script's command lines (``experiments/llama_cpp_peer.py``), with the
programs replaced by a recorder: each mode string reaches llama.cpp as the flags it names."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location(
        "llama_cpp_peer_under_test", ROOT / "experiments" / "llama_cpp_peer.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


peer = _load()

OUT = "decoded 96 tokens in 2.000 seconds, speed: 48.000 t/s\nn_drafted = 80\nn_accept = 60\n"


@pytest.mark.parametrize(
    "mode, flags, absent",
    [
        ("ngram-simple", ["--spec-type", "ngram-simple"], ["--spec-ngram-simple-size-n", "-md"]),
        (
            "ngram-simple:3:16",
            ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "16"],
            ["-md"],
        ),
        (
            "draft-simple:8:0.5",
            ["--spec-type", "draft-simple", "-md", "d.gguf", "--spec-draft-n-max", "8", "--spec-draft-p-min", "0.5"],
            ["--spec-ngram-simple-size-n"],
        ),
    ],
)
def test_each_mode_reaches_llama_cpp_as_its_flags(monkeypatch, mode, flags, absent):
    seen = []

    def fake_run(cmd):
        seen.append(cmd)
        return OUT, ""

    monkeypatch.setattr(peer, "run", fake_run)
    got = peer.spec_rate(Path("bin"), Path("t.gguf"), Path("d.gguf"), Path("p.txt"), mode, 96, 2, 0.0)
    assert got == {"tokens": 96, "seconds": 2.0, "tokens_per_s": 48.0, "drafted": 80, "accepted": 60}
    (cmd,) = seen
    for i in range(0, len(flags), 2):  # each flag followed by its value
        assert cmd[cmd.index(flags[i]) + 1] == flags[i + 1]
    assert not [a for a in absent if a in cmd]
