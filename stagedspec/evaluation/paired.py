"""Decoding a job's questions with one method and the plain baseline, and the job's metrics.

Multi-turn questions (MT-bench rows): turn t's prompt holds the earlier user messages
and the answers *this method* generated to them, as chat history. All first turns are
decoded before any second turn. A batch holds prompts of one category only, so the
per-category metrics (``speedup/<category>``, ...) time whole batches.

Timing on a shared CPU drifts by more than the effects we measure (the same baseline on
the same prompts moved from 8.75 to 10.13 tok/s between jobs of one sweep), so the
method and the baseline are *interleaved*: each batch is decoded by the method and then
by the baseline (the other order on every other batch and repeat), ``repeats`` times, before the next
batch. Each such batch is a *unit*: the speedup's confidence interval rests on the
spread between units (``intervals.py``). Outputs are those of the first repeat (decoding
is deterministic, so the others repeat them; a difference is logged as a warning).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from collections.abc import Callable, Iterator

import torch
from tqdm import tqdm

from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.metrics import cost_model
from stagedspec.metrics.intervals import interval_metrics, rate_interval, speedup_interval
from stagedspec.metrics.round_stats import GenerationResult, SequenceResult
from stagedspec.models.chat_text import encode, ids_to_text
from stagedspec.models.model_loading import LoadedModel
from stagedspec.prompts.prompt_sets import Question

log = logging.getLogger(__name__)


@dataclass
class BatchRun:
    """One batch decoded once: its category, its unit (the same number for the method's
    and the baseline's decoding of the same prompts) and which repeat this was."""

    category: str
    unit: int
    repeat: int
    result: GenerationResult


@dataclass
class MethodRun:
    """Everything one method produced over the job's prompts."""

    method: str
    records: list[dict] = field(default_factory=list)
    batches: list[BatchRun] = field(default_factory=list)

    def results(self, category: str | None = None, first_only: bool = False) -> list[GenerationResult]:
        return [
            b.result
            for b in self.batches
            if (category is None or b.category == category) and (not first_only or b.repeat == 0)
        ]

    @property
    def categories(self) -> list[str]:
        return list(dict.fromkeys(b.category for b in self.batches))


def _chunks(xs: list, n: int) -> list[list]:
    return [xs[i : i + n] for i in range(0, len(xs), n)]


def decode_paired(
    method_dec: SpeculativeDecoder,
    ar_dec: SpeculativeDecoder | None,
    target: LoadedModel,
    questions: list[Question],
    *,
    batch_size: int,
    max_new_tokens: int,
    max_prompt: int,
    repeats: int = 1,
    seed: int = 0,
    after_batch: Callable[[], None] = lambda: None,
) -> tuple[MethodRun, MethodRun | None]:
    """Decode every turn of every question with the method and (if given) the baseline,
    interleaved batch by batch, each batch ``repeats`` times; returns both runs.

    A prompt longer than ``max_prompt`` tokens keeps its end (it holds the question).
    ``after_batch`` runs after each of the method's batches (the runner's fault-injection
    hook). The global torch seed is reset to ``seed`` before every decode, so neither
    method's randomness depends on the order they ran in."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    decs = [(method_dec, MethodRun(method_dec.method))]
    if ar_dec is not None:
        decs.append((ar_dec, MethodRun(ar_dec.method)))
    answers = [{i: [] for i in range(len(questions))} for _ in decs]
    total = sum(len(q.turns) for q in questions)
    truncated = differed = 0
    with tqdm(total=total, desc=method_dec.method, unit="prompt", leave=False) as bar:
        for unit, (turn, cat, batch) in enumerate(_turn_batches(questions, batch_size)):
            prompts = []
            for m in range(len(decs)):
                ps, cut = _batch_prompts(
                    target, [questions[i] for i in batch], turn, [answers[m][i] for i in batch], max_prompt
                )
                prompts.append(ps)
                truncated += cut if m == 0 else 0
            for rep in range(repeats):
                # alternate per unit and repeat: with repeats=1 the method does not always go first
                order = range(len(decs)) if (rep + unit) % 2 == 0 else reversed(range(len(decs)))
                for m in order:
                    dec, run = decs[m]
                    torch.manual_seed(seed)
                    res = dec.generate(prompts[m], max_new_tokens)
                    run.batches.append(BatchRun(cat, unit, rep, res))
                    if rep == 0:
                        _file_answers(run, res, target, questions, batch, turn, prompts[m], answers[m])
                    else:
                        first = next(b.result for b in run.batches if b.unit == unit and b.repeat == 0)
                        differed += any(x.output_ids != y.output_ids for x, y in zip(first.sequences, res.sequences))
                    if m == 0 and rep == 0:
                        after_batch()
            bar.update(len(batch))
    if truncated:
        log.warning("%d prompt(s) longer than %d tokens were cut to their last %d", truncated, max_prompt, max_prompt)
    if differed:
        log.warning("%d repeated batch(es) decoded to other tokens than their first repeat", differed)
    return decs[0][1], (decs[1][1] if len(decs) > 1 else None)


def _turn_batches(questions: list[Question], batch_size: int) -> Iterator[tuple[int, str, list[int]]]:
    """(turn, category, question indices) of each batch: every question's first turn before
    any second turn, one category per batch, at most ``batch_size`` questions."""
    for turn in range(max(len(q.turns) for q in questions)):
        by_cat: dict[str, list[int]] = {}
        for i, q in enumerate(questions):
            if len(q.turns) > turn:
                by_cat.setdefault(q.category, []).append(i)
        for cat, idx in by_cat.items():
            for batch in _chunks(idx, batch_size):
                yield turn, cat, batch


def _batch_prompts(
    target: LoadedModel, questions: list[Question], turn: int, answers: list[list[str]], max_prompt: int
) -> tuple[list[list[int]], int]:
    """Each question's prompt ids at ``turn``, with the earlier turns and one decoder's own
    ``answers`` to them as chat history, cut to their last ``max_prompt`` tokens; and how
    many were cut."""
    prompts, cut = [], 0
    for q, earlier in zip(questions, answers):
        ids = encode(target, q.turns[turn], list(zip(q.turns[:turn], earlier)))
        if len(ids) > max_prompt:  # keep the end: it holds the question
            ids, cut = ids[-max_prompt:], cut + 1
        prompts.append(ids)
    return prompts, cut


def _file_answers(
    run: MethodRun,
    res: GenerationResult,
    target: LoadedModel,
    questions: list[Question],
    batch: list[int],
    turn: int,
    prompts: list[list[int]],
    answers: dict[int, list[str]],
) -> None:
    """A first repeat's outputs: each becomes its question's answer (the history of its
    next turn) and a record of ``run``."""
    for i, prompt, seq in zip(batch, prompts, res.sequences):
        text = ids_to_text(target, seq.output_ids)
        answers[i].append(text)
        run.records.append(_record(questions[i], turn, run.method, prompt, seq, text))


def _record(q: Question, turn: int, method: str, prompt: list[int], seq: SequenceResult, text: str) -> dict:
    """One line of ``outputs.jsonl``: a prompt turn, what the method made of it, and its rounds."""
    return {
        "question_id": q.question_id,
        "category": q.category,
        "turn": turn + 1,
        "method": method,
        "prompt_ids": prompt,
        "output_ids": seq.output_ids,
        "text": text,
        "provenance": seq.provenance,
        "finished_reason": seq.finished_reason,
        "rounds": [asdict(r) for r in seq.rounds],
    }


TIMED = (
    "tokens_per_s",
    "wall_time_s",
    "prefill_time_s",
    "time_draft_s",
    "time_verify_s",
    "time_overhead_s",
    "share_outside_forwards",
    "round_s",
    "target_call_s",
)
"""Summary keys that come from timings: pooled over every repeat (the wall times are per
pass, i.e. divided by ``repeats``). Every other key counts tokens, taken from the first
repeat, so ``emitted`` is what one pass emitted."""


def _summary(run: MethodRun, category: str | None = None) -> dict[str, float]:
    first = GenerationResult.merge(run.results(category, first_only=True)).summary()
    every = GenerationResult.merge(run.results(category)).summary()
    passes = len(run.results(category)) / max(1, len(run.results(category, first_only=True)))
    for key, value in every.items():
        if key in TIMED or key.startswith(("verify_s/", "draft_call_s/")):
            first[key] = value / passes if key.endswith("time_s") or key.startswith("time_") else value
    return first


def _units(run: MethodRun, ar: MethodRun | None, category: str | None = None) -> list[list[tuple]]:
    """Per unit, per repeat: (tokens, seconds) of the method, then of the baseline."""
    out: dict[int, dict[int, tuple]] = {}
    base = {(b.unit, b.repeat): b.result for b in ar.batches} if ar is not None else {}
    for b in run.batches:
        if category is not None and b.category != category:
            continue
        row = (float(b.result.emitted), b.result.wall_time)
        if ar is not None:
            other = base[(b.unit, b.repeat)]
            row += (float(other.emitted), other.wall_time)
        out.setdefault(b.unit, {})[b.repeat] = row
    return [list(reps.values()) for _, reps in sorted(out.items())]


CATEGORY_METRICS = (
    "tokens_per_s",
    "mean_acceptance_length",
    "mean_accepted_tokens_per_call",
    "mean_emitted_tokens_per_call",
    "acceptance_rate",
    "alpha_hat",
)
"""The metrics a job reports per category too (``<metric>/<category>``)."""


def _category_metrics(run: MethodRun) -> dict[str, float]:
    """``CATEGORY_METRICS`` of each of the run's categories, as ``<metric>/<category>``."""
    m: dict[str, float] = {}
    for c in run.categories:
        s = _summary(run, c)
        for key in CATEGORY_METRICS:
            if key in s:
                m[f"{key}/{c}"] = s[key]
    return m


def job_metrics(
    run: MethodRun, ar: MethodRun | None, same_text: bool, prediction: dict[str, float] | None = None
) -> dict[str, float]:
    """The job's metrics (``metrics/round_stats.py`` defines them) over all its prompts, per category
    (``<metric>/<category>``), with 95% intervals (``<metric>_ci_low``, ``_ci_high``) for
    every rate and speedup, the cost model's in-sample accounting (``accounted_*``) and,
    given the out-of-sample ``prediction`` made before timing (``prediction.py``), its
    error against the measured speedup (``metrics/cost_model.py``). ``same_text``: the method should
    emit plain decoding's tokens (greedy, or ``coupling=gumbel``): ``ar_match_rate`` counts where it did."""
    m = _summary(run)
    m["n_prompts"] = float(len(run.records))
    m["repeats"] = float(max((b.repeat for b in run.batches), default=0) + 1)
    units = _units(run, None)
    m |= interval_metrics("tokens_per_s", rate_interval([[u[:2] for u in reps] for reps in units]))
    m |= _category_metrics(run)
    merged = GenerationResult.merge(run.results())
    ar_merged = None
    if ar is not None and ar is not run:
        ar_merged = GenerationResult.merge(ar.results())
    elif ar is run:
        ar_merged = merged
    m |= cost_model.round_costs(merged, ar_merged)
    if ar is not None:
        a = _summary(ar)
        m["ar_tokens_per_s"] = a["tokens_per_s"]
        m["ar_wall_time_s"] = a["wall_time_s"]
        m["speedup"] = m["tokens_per_s"] / a["tokens_per_s"] if a["tokens_per_s"] > 0 else 0.0
        m |= cost_model.account(run.results(), a["tokens_per_s"])
        if "accounted_speedup" in m and m["speedup"] > 0:
            m["accounting_error"] = m["accounted_speedup"] / m["speedup"] - 1.0
        m |= prediction or {}
        if "predicted_speedup" in m and m["speedup"] > 0:
            m["prediction_error"] = m["predicted_speedup"] / m["speedup"] - 1.0
        if ar is not run:
            both = _units(run, ar)
            m |= interval_metrics("speedup", speedup_interval(both))
            m |= interval_metrics("ar_tokens_per_s", rate_interval([[u[2:] for u in reps] for reps in both]))
            m |= _noise(both)
        for c in run.categories:
            ar_tps = _summary(ar, c)["tokens_per_s"]
            m[f"ar_tokens_per_s/{c}"] = ar_tps
            m[f"speedup/{c}"] = m[f"tokens_per_s/{c}"] / ar_tps if ar_tps > 0 else 0.0
            if ar is not run:
                m |= interval_metrics(f"speedup/{c}", speedup_interval(_units(run, ar, c)))
        if same_text:  # exactness check: greedy (or gumbel-coupled) speculation must reproduce plain decoding
            same = sum(x["output_ids"] == y["output_ids"] for x, y in zip(run.records, ar.records))
            m["ar_match_rate"] = same / len(run.records)
    else:
        m |= cost_model.account(run.results(), None)
        m |= prediction or {}
    return m


def _noise(units: list[list[tuple]]) -> dict[str, float]:
    """``timing_spread``: the median over units of the baseline's (max - min) / mean
    seconds across repeats; the share a timing moved between identical decodes."""
    spreads = []
    for reps in units:
        secs = [r[3] for r in reps]
        if len(secs) >= 2 and sum(secs) > 0:
            spreads.append((max(secs) - min(secs)) / (sum(secs) / len(secs)))
    if not spreads:
        return {}
    spreads.sort()
    mid = len(spreads) // 2
    return {"timing_spread": spreads[mid] if len(spreads) % 2 else (spreads[mid - 1] + spreads[mid]) / 2}
