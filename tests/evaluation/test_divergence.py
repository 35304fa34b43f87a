"""Where a greedy output leaves plain decoding's, and the target's top-two gap there
(``evaluation/divergence.py``): positions and steps by hand, gaps against a full forward."""

from __future__ import annotations

import pytest
import torch

from stagedspec.evaluation.divergence import divergence_metrics, divergences, dtype_step, first_divergence
from stagedspec.evaluation.bench_methods import hf_generate
from tests.helpers import tiny_target


def test_first_divergence_by_hand():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2, 3], [9, 2, 3]) == 0
    assert first_divergence([1, 2], [1, 2, 3]) == 2  # one ended early (EOS): it leaves there
    assert first_divergence([], [4]) == 0 and first_divergence([], []) is None


def test_dtype_step_by_hand():
    assert dtype_step(1.0, torch.bfloat16) == 2.0**-7
    assert dtype_step(3.0, torch.bfloat16) == 2.0**-6  # 3 = 1.5 * 2^1: steps of 2^(1 - 7)
    assert dtype_step(-5.0, torch.bfloat16) == 2.0**-5
    assert dtype_step(0.75, torch.bfloat16) == 2.0**-8
    assert dtype_step(1.0, torch.float32) == 2.0**-23
    # a bfloat16 number plus one step is the next bfloat16 number
    x = torch.tensor(3.0, dtype=torch.bfloat16)
    assert float(torch.nextafter(x, torch.tensor(9.0, dtype=torch.bfloat16))) - 3.0 == dtype_step(3.0, torch.bfloat16)


def test_divergences_against_a_full_forward():
    target = tiny_target()
    model = target.model
    prompts = [[5, 6, 7, 8, 5, 6, 7], [9, 10, 11, 9, 10]]
    plain = [
        {"question_id": q, "turn": 1, "prompt_ids": p, "output_ids": hf_generate(model, p, 8)}
        for q, p in enumerate(prompts)
    ]
    same = dict(plain[0])
    changed = dict(plain[1], output_ids=list(plain[1]["output_ids"]))
    changed["output_ids"][3] = (changed["output_ids"][3] + 1) % target.vocab_size
    found = divergences(model, [same, changed], plain)
    assert found[0] is None
    d = found[1]
    assert d["position"] == 3
    with torch.no_grad():  # the target's logits after the prompt and plain decoding's first 3 tokens
        logits = model(torch.tensor([prompts[1] + plain[1]["output_ids"][:3]])).logits[0, -1]
    top = logits.topk(2).values
    assert d["gap"] == pytest.approx(float(top[0] - top[1]), rel=1e-5)
    assert d["gap_steps"] == pytest.approx(d["gap"] / dtype_step(float(top[0]), torch.float32))
    assert d["gap"] > 0  # greedy decoding's pick is the strict top here


def test_divergence_metrics_by_hand():
    found = [None, {"position": 5, "gap": 0.1, "gap_steps": 2.0}, {"position": 3, "gap": 0.05, "gap_steps": 4.0}]
    assert divergence_metrics(found) == {
        "ar_divergences": 2.0,
        "ar_first_divergence_min": 3.0,
        "ar_divergence_gap_max": 0.1,
        "ar_divergence_gap_steps_max": 4.0,
    }
    assert divergence_metrics([None, None]) == {"ar_divergences": 0.0}
