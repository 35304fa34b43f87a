"""Where a greedy output leaves plain decoding's, and how close a call the target made there.

In float32 with ``kernels=hf`` a greedy speculative output equals plain decoding's token for
token (the tests hold that). In bfloat16 it need not: a forward that scores several rows
rounds differently from a one-row forward, and where the target's two likeliest tokens
are a near-tie the argmax can flip. For each output that differs, ``divergences`` reports
the first position where it does and the target's top-two logit gap there, also in steps
of the dtype at the top logit (one step: the spacing of representable numbers there); a
gap of a few steps is rounding, a wide one would be a bug.
"""

from __future__ import annotations

import math

import torch


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (the shorter one's length when one is
    a prefix of the other); None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def dtype_step(x: float, dtype: torch.dtype) -> float:
    """The spacing of ``dtype``'s numbers at ``x`` (its unit in the last place)."""
    if x == 0 or not math.isfinite(x):
        return float(torch.finfo(dtype).tiny)
    return float(torch.finfo(dtype).eps) * 2.0 ** math.floor(math.log2(abs(x)))


@torch.no_grad()
def top2_gap(model: torch.nn.Module, ids: list[int]) -> tuple[float, float]:
    """The target's top-two logit gap for the token after ``ids`` (one plain forward over
    all of them, the model's own path), and the dtype's step at the top logit."""
    p = next(model.parameters())
    logits = model(torch.tensor([ids], device=p.device), logits_to_keep=1).logits[0, -1].float()
    top = logits.topk(2).values
    return float(top[0] - top[1]), dtype_step(float(top[0]), p.dtype)


def divergences(model: torch.nn.Module, records: list[dict], plain: list[dict]) -> list[dict | None]:
    """Per record (``outputs.jsonl`` lines of a greedy job, paired with plain decoding's by
    question and turn): None where the outputs are equal, else ``position`` (first token
    that differs), ``gap`` (the target's top-two logit gap after the prompt and plain
    decoding's tokens before it) and ``gap_steps`` (that gap in steps of the model's dtype)."""
    by_turn = {(r["question_id"], r["turn"]): r for r in plain}
    out: list[dict | None] = []
    for r in records:
        ref = by_turn[(r["question_id"], r["turn"])]
        i = first_divergence(r["output_ids"], ref["output_ids"])
        if i is None:
            out.append(None)
            continue
        gap, step = top2_gap(model, list(r["prompt_ids"]) + list(ref["output_ids"][:i]))
        out.append({"position": i, "gap": gap, "gap_steps": gap / step})
    return out


def divergence_metrics(found: list[dict | None]) -> dict[str, float]:
    """``ar_divergences`` (outputs that differ), and where any do, the earliest first
    divergence (``ar_first_divergence_min``) and the widest top-two gap at one, in logits
    and in dtype steps (``ar_divergence_gap_max``, ``ar_divergence_gap_steps_max``)."""
    hits = [d for d in found if d is not None]
    m = {"ar_divergences": float(len(hits))}
    if hits:
        m["ar_first_divergence_min"] = float(min(d["position"] for d in hits))
        m["ar_divergence_gap_max"] = max(d["gap"] for d in hits)
        m["ar_divergence_gap_steps_max"] = max(d["gap_steps"] for d in hits)
    return m
