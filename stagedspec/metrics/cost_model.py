"""Two cost models of a run's speedup: one out of sample (a prediction), one in sample
(an accounting).

``predict_out_of_sample``, logged as ``predicted_*``: before anything is timed, the
runner decodes a few prompts that are *not* evaluated (held-out questions of the job's
set, or the training templates: ``evaluation/prediction.py``) with the method and with
plain decoding; from that calibration alone it takes the rounds' yields, the mean round
time, the prefill and plain decoding's time per token, and predicts the job's speedup
for ``max_new_tokens`` tokens per row. Nothing of the evaluated prompts enters it, so its
error against the measured ``speedup`` (``prediction_error``) says how well a short
calibration on other text foresees a run: acceptance that differs between the two kinds
of text shows up there.

``account``, logged as ``accounted_*``: the same formulas fed with the evaluated run's
own timings and acceptance. Its gap to the measured speedup (``accounting_error``)
checks the bookkeeping and the i.i.d. model, not foresight:

- measured, times: the mean wall time of a batch round of the method, split into each
  draft level's own forwards (calls per round x seconds per call), drafting outside
  forwards, the target's verification T(n) for the n positions it scores (``verify_s/<n>``)
  and bookkeeping; each batch's prefill; the plain baseline's wall time for its tokens;
- measured, the job's size: the tokens each row emitted, and the depth of the draft
  each round offered (k for a chain) — neither depends on what the target accepted;
- estimated: alpha_hat = accepted / (accepted + rejections), the per-token acceptance of
  an i.i.d. model (``round_stats.py``);
- accounted: tokens per target call E = mean over rounds of 1 + a + ... + a^depth at
  a = alpha_hat; the rounds a row needs to emit its N tokens, N / E + E[X (X - 1)] /
  (2 E^2) (X: tokens a round yields under the same model; the second term is the
  expected overshoot of the last round, which ``max_new_tokens`` or EOS cuts: Wald's
  identity with the stationary excess of an integer renewal); the batch rounds, the sum
  over batches of the most any of its rows needs; the wall time, prefill + rounds x
  (mean round time); and so the speedup, (tokens / wall) / (baseline tokens per second).

The measured speedup differs from the accounting exactly where the i.i.d. model does:
acceptance that varies from context to context (copying phases), or rounds cut by
``max_new_tokens`` and EOS. Standard library only.
"""

from __future__ import annotations

from collections import Counter

from .round_stats import GenerationResult


def yield_moments(alpha: float, depths: Counter) -> tuple[float, float]:
    """E[X] and E[X (X - 1)] of the tokens X a round yields when each draft token is
    accepted with probability alpha independently: X = j with probability
    alpha^(j-1) (1 - alpha) for j <= d, and d + 1 with probability alpha^d (all accepted),
    mixed over the rounds' draft depths d (``depths``: depth -> rounds)."""
    n = sum(depths.values())
    m1 = m2 = 0.0
    for d, count in depths.items():
        probs = [alpha ** (j - 1) * (1 - alpha) for j in range(1, d + 1)] + [alpha**d]
        m1 += count * sum(j * p for j, p in enumerate(probs, 1))
        m2 += count * sum(j * (j - 1) * p for j, p in enumerate(probs, 1))
    return m1 / n, m2 / n


def predicted_rounds(tokens: int, mean: float, second: float) -> float:
    """Expected rounds to emit ``tokens`` when a round yields X tokens, E[X] = ``mean``,
    E[X (X - 1)] = ``second``: tokens / mean plus the last round's expected overshoot."""
    return tokens / mean + second / (2 * mean * mean) if tokens else 0.0


def round_costs(method: GenerationResult, ar: GenerationResult | None) -> dict[str, float]:
    """The measured side: one batch round of the method, in seconds, by part, and against
    the baseline's single-position target forward T(1): ``cost_ratio/<level>`` (c: one
    forward of the level), ``stage_cost/<level>`` (a round's forwards of the level and of
    every level below it, which it drafts through), ``verify_cost/<n>`` (T(n) / T(1))."""
    s = method.summary()
    n = len(method.phase_times)
    if not n:
        return {}
    draft = sum(p.draft for p in method.phase_times)
    forwards = sum(method.draft_call_time.values())
    out = {
        "round_s": s["round_s"],
        "round_draft_other_s": max(0.0, draft - forwards) / n,
        "round_verify_s": sum(p.verify for p in method.phase_times) / n,
        "round_overhead_s": sum(p.overhead for p in method.phase_times) / n,
    }
    for level, secs in method.draft_call_time.items():
        out[f"round_draft_forward_s/{level}"] = secs / n
    if ar is not None and ar.target_calls:
        a = ar.summary()
        t1 = a["target_call_s"]
        out["ar_round_s"] = a.get("round_s", 0.0)
        out["ar_target_call_s"] = t1
        below = 0.0  # levels come lowest first: a level's stage cost adds the levels it drafts through
        for level, secs in method.draft_call_time.items():
            if f"draft_call_s/{level}" in s and t1 > 0:
                out[f"cost_ratio/{level}"] = s[f"draft_call_s/{level}"] / t1
                below += secs / n
                out[f"stage_cost/{level}"] = below / t1
        v1 = a.get("verify_s/1")
        for key, secs in s.items():
            if key.startswith("verify_s/") and v1:
                out[f"verify_cost/{key[len('verify_s/') :]}"] = secs / v1
    return out


def _round_yield(merged: GenerationResult, alpha: float) -> tuple[float, float]:
    """E[X] and E[X (X - 1)] of a round's yield at per-token acceptance ``alpha``, over
    the draft depths ``merged``'s rounds offered."""
    return yield_moments(alpha, Counter(r.draft_depth for q in merged.sequences for r in q.rounds))


def empirical_yield(merged: GenerationResult) -> tuple[float, float] | None:
    """E[X] and E[X (X - 1)] of the tokens X a round emitted, over ``merged``'s rounds
    but each sequence's last (which ``max_new_tokens`` or EOS may have cut); None when no
    round is left. Unlike ``_round_yield`` it needs no model of acceptance: a draft whose
    length follows its confidence (``stop_below``) accepts more exactly in its deep
    rounds, which one alpha for every depth cannot express."""
    xs = [r.emitted for q in merged.sequences for r in q.rounds[:-1]]
    if not xs:
        return None
    return sum(xs) / len(xs), sum(x * (x - 1) for x in xs) / len(xs)


def account(batches: list[GenerationResult], ar_tokens_per_s: float | None) -> dict[str, float]:
    """In sample: ``accounted_tokens_per_call``, ``accounted_rounds``, ``accounted_wall_s``,
    ``accounted_tokens_per_s`` and (given the baseline's measured rate)
    ``accounted_speedup`` for the method's batches (every repeat), from their own timings."""
    merged = GenerationResult.merge(batches)
    s = merged.summary()
    alpha = s.get("alpha_hat")
    if alpha is None or not merged.phase_times:
        return {}
    E, second = _round_yield(merged, alpha)
    rounds = sum(
        max((predicted_rounds(len(q.output_ids), E, second) for q in b.sequences), default=0.0) for b in batches
    )
    wall = merged.prefill_time + rounds * s["round_s"]
    out = {
        "accounted_tokens_per_call": E,
        "accounted_rounds": rounds,
        "accounted_wall_s": wall,
        "accounted_tokens_per_s": merged.emitted / wall if wall > 0 else 0.0,
    }
    if ar_tokens_per_s:
        out["accounted_speedup"] = out["accounted_tokens_per_s"] / ar_tokens_per_s
    return out


def predict_out_of_sample(
    method: list[GenerationResult], ar: list[GenerationResult], tokens: int, rows: int = 1
) -> dict[str, float]:
    """Out of sample: the speedup of a job that decodes ``tokens`` new tokens per row in
    batches of ``rows``, from calibration batches alone (``method``'s and plain decoding's,
    on prompts the job does not evaluate). Per batch, the method takes prefill +
    R x (round time), R = ``predicted_rounds(tokens, E, E[X (X - 1)])`` with the moments
    of the calibration's own round yields (``empirical_yield``; the i.i.d. model at its
    alpha_hat when every sequence ran one round); plain decoding takes prefill + ``tokens``
    x (its round time). Returns ``predicted_tokens_per_call``, ``predicted_rounds``,
    ``predicted_tokens_per_s``, ``predicted_ar_tokens_per_s``, ``predicted_speedup`` and
    what they rest on (``prediction_alpha_hat``, ``prediction_iid_tokens_per_call``: what
    the i.i.d. model at that alpha would say, ``prediction_round_s``,
    ``prediction_ar_round_s``, ``prediction_calib_tokens``); empty when the calibration
    saw no draft or no round."""
    if not method or not ar:
        return {}
    m, a = GenerationResult.merge(method), GenerationResult.merge(ar)
    s, sa = m.summary(), a.summary()
    alpha = s.get("alpha_hat")
    if alpha is None or not m.phase_times or not a.phase_times or tokens < 1:
        return {}
    iid = _round_yield(m, alpha)
    E, second = empirical_yield(m) or iid
    rounds = predicted_rounds(tokens, E, second)
    wall = m.prefill_time / len(method) + rounds * s["round_s"]
    ar_wall = a.prefill_time / len(ar) + tokens * sa["round_s"]
    return {
        "predicted_tokens_per_call": E,
        "predicted_rounds": rounds,
        "predicted_tokens_per_s": rows * tokens / wall,
        "predicted_ar_tokens_per_s": rows * tokens / ar_wall,
        "predicted_speedup": ar_wall / wall,
        "prediction_alpha_hat": alpha,
        "prediction_iid_tokens_per_call": iid[0],
        "prediction_round_s": s["round_s"],
        "prediction_ar_round_s": sa["round_s"],
        "prediction_calib_tokens": float(m.emitted),
    }
