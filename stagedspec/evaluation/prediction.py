"""The calibration behind ``predicted_speedup``: a short decode on prompts the job does
not evaluate, before anything is timed.

Two sources (``prediction.source``):

- ``heldout`` (default): first turns of questions of the dev split of the job's own
  prompt set (``prompts/splits.py``; of its evaluated categories) that the job does not
  evaluate, drawn with a seed of their own: the same kind of text, none of the same
  prompts, and never a test question results are reported on;
- ``training``: the training templates (``prompts/training_prompts.py``: no benchmark
  task), for a job that evaluates its whole dev split.

The method and plain decoding alternate batch by batch, as in ``paired.decode_paired``,
so drift on a shared machine falls on both. ``metrics.cost_model.predict_out_of_sample``
turns the two into the prediction; the runner logs it with its source, beside the run's
measured speedup.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.metrics import cost_model
from stagedspec.models.chat_text import encode
from stagedspec.tuning.tree_calibration import calibration_prompts

SEED = 4242
"""Seed of the calibration's prompt draw (``tree=auto`` draws its own with another)."""


def pick_heldout(questions: list[Any], n: int, seed: int = SEED) -> list[Any]:
    """``n`` of ``questions`` (fewer if there are fewer), spread over their categories:
    each category's questions shuffled with ``seed``, then taken round-robin, categories
    in order of first appearance."""
    rng = random.Random(seed)
    by_cat: dict[str, list[Any]] = {}
    for q in questions:
        by_cat.setdefault(q.category, []).append(q)
    cols = []
    for qs in by_cat.values():
        qs = list(qs)
        rng.shuffle(qs)
        cols.append(qs)
    order = [col[i] for i in range(max(map(len, cols), default=0)) for col in cols if i < len(col)]
    return order[:n]


def calibration_ids(
    target, kind: str, n: int, heldout: list[Any], max_prompt: int, *, tokens: int, data_name: str | None = None
) -> tuple[list[list[int]], str]:
    """``n`` encoded calibration prompts (each cut to its last ``max_prompt`` tokens) and
    what they are, as logged (param ``prediction.calibration``). "heldout" takes first turns
    of ``heldout`` (``pick_heldout``; fewer questions than ``n`` are reused in turn) and,
    when the job evaluates its whole dev split (``heldout`` empty), the training templates,
    saying so."""
    if kind == "heldout" and heldout:
        picked = pick_heldout(heldout, n)
        ids = [encode(target, picked[i % len(picked)].turns[0], [])[-max_prompt:] for i in range(n)]
        names = ", ".join(str(q.question_id) for q in picked)
        return ids, (
            f"heldout: first turns of {data_name} dev questions {names} (not evaluated), {tokens} tokens, before timing"
        )
    why = f" (heldout: every dev question of {data_name} is evaluated)" if kind == "heldout" else ""
    ids = [p[-max_prompt:] for p in calibration_prompts(target, n, "training", seed=SEED)]
    return ids, f"training templates{why}, {n} prompts x {tokens} tokens, before timing"


def predict(
    method_dec: SpeculativeDecoder,
    ar_dec: SpeculativeDecoder,
    prompt_ids: list[list[int]],
    *,
    tokens: int,
    batch_size: int,
    max_new_tokens: int,
    seed: int = 0,
) -> dict[str, float]:
    """Decode ``prompt_ids`` (whole batches of ``batch_size``, as ``calibration_ids``
    gives them for a multiple of it) for ``tokens`` new tokens with both decoders,
    alternating, then predict the job's speedup at ``max_new_tokens`` per row
    (``cost_model.predict_out_of_sample``)."""
    if not prompt_ids:
        return {}
    method, ar = [], []
    for i in range(0, len(prompt_ids), batch_size):
        batch = prompt_ids[i : i + batch_size]
        pair = [(method_dec, method), (ar_dec, ar)]
        for dec, out in pair if (i // batch_size) % 2 == 0 else pair[::-1]:
            torch.manual_seed(seed)
            out.append(dec.generate(batch, tokens))
    return cost_model.predict_out_of_sample(method, ar, max_new_tokens, rows=batch_size)
