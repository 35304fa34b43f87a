"""The calibration behind ``predicted_speedup``: a short decode on prompts the job does
not evaluate, before anything is timed.

The prompts are the training templates (``prompts/training_prompts.py``: they share no
task with any benchmark set), drawn with a seed of their own; the method and plain
decoding alternate batch by batch, as in ``paired.decode_paired``, so drift on a shared
machine falls on both. ``metrics.cost_model.predict_out_of_sample`` turns the two into
the prediction; the runner logs it with its source, beside the run's measured speedup.
"""

from __future__ import annotations

import torch

from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.metrics import cost_model
from stagedspec.search.tree_calibration import calibration_prompts

SEED = 4242
"""Seed of the calibration's prompt draw (``tree=auto`` draws its own with another)."""


def source(prompts: int, tokens: int) -> str:
    """What a prediction rests on, as logged (param ``prediction.source``)."""
    return f"training templates, {prompts} prompts x {tokens} tokens, before timing"


def predict(method_dec: SpeculativeDecoder, ar_dec: SpeculativeDecoder, target, *, prompts: int, tokens: int,
            batch_size: int, max_new_tokens: int, max_prompt: int, seed: int = 0) -> dict[str, float]:
    """Decode ``prompts`` calibration prompts (at least one batch of ``batch_size``) for
    ``tokens`` new tokens with both decoders, alternating, then predict the job's speedup
    at ``max_new_tokens`` per row (``cost_model.predict_out_of_sample``)."""
    if prompts < 1:
        return {}
    n = -(-max(prompts, batch_size) // batch_size) * batch_size
    ids = [p[-max_prompt:] for p in calibration_prompts(target, n, "training", seed=SEED)]
    method, ar = [], []
    for i in range(0, n, batch_size):
        batch = ids[i : i + batch_size]
        pair = [(method_dec, method), (ar_dec, ar)]
        for dec, out in (pair if (i // batch_size) % 2 == 0 else pair[::-1]):
            torch.manual_seed(seed)
            out.append(dec.generate(batch, tokens))
    return cost_model.predict_out_of_sample(method, ar, max_new_tokens, rows=batch_size)
