"""Decoding a job's questions with one method, and the job's metrics over them.

Multi-turn questions (MT-bench rows): turn t's prompt holds the earlier user messages
and the answers *this method* generated to them, as chat history. All first turns are
decoded before any second turn. A batch holds prompts of one category only, so the
per-category metrics (``speedup/<category>``, ...) time whole batches.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Callable

from tqdm import tqdm

from .data import Question
from .decoding import SpeculativeDecoder
from .models import LoadedModel
from .stats import GenerationResult, SequenceResult
from .text import encode, ids_to_text

log = logging.getLogger(__name__)


@dataclass
class MethodRun:
    """Everything one method produced over the job's prompts."""

    method: str
    records: list[dict] = field(default_factory=list)
    results: list[tuple[str, GenerationResult]] = field(default_factory=list)  # (category, batch result)


def _chunks(xs: list, n: int) -> list[list]:
    return [xs[i : i + n] for i in range(0, len(xs), n)]


def decode_all(
    decoder: SpeculativeDecoder, method: str, target: LoadedModel, questions: list[Question], *, batch_size: int,
    max_new_tokens: int, max_prompt: int, after_batch: Callable[[], None] = lambda: None,
) -> MethodRun:
    """Decode every turn of every question, turn by turn, in batches of one category.

    A prompt longer than ``max_prompt`` tokens keeps its end (it holds the question).
    ``after_batch`` runs after each batch (the runner's fault-injection hook)."""
    out = MethodRun(method)
    answers: dict[int, list[str]] = {i: [] for i in range(len(questions))}
    total = sum(len(q.turns) for q in questions)
    truncated = 0
    with tqdm(total=total, desc=method, unit="prompt", leave=False) as bar:
        for turn in range(max(len(q.turns) for q in questions)):
            by_cat: dict[str, list[int]] = {}
            for i, q in enumerate(questions):
                if len(q.turns) > turn:
                    by_cat.setdefault(q.category, []).append(i)
            for cat, idx in by_cat.items():
                for batch in _chunks(idx, batch_size):
                    prompts = []
                    for i in batch:
                        q = questions[i]
                        ids = encode(target, q.turns[turn], list(zip(q.turns[:turn], answers[i])))
                        if len(ids) > max_prompt:  # keep the end: it holds the question
                            ids, truncated = ids[-max_prompt:], truncated + 1
                        prompts.append(ids)
                    res = decoder.generate(prompts, max_new_tokens)
                    out.results.append((cat, res))
                    for i, prompt, seq in zip(batch, prompts, res.sequences):
                        q = questions[i]
                        text = ids_to_text(target, seq.output_ids)
                        answers[i].append(text)
                        out.records.append(_record(q, turn, method, prompt, seq, text))
                    bar.update(len(batch))
                    after_batch()
    if truncated:
        log.warning("%s: %d prompt(s) longer than %d tokens were cut to their last %d", method, truncated, max_prompt, max_prompt)
    return out


def _record(q: Question, turn: int, method: str, prompt: list[int], seq: SequenceResult, text: str) -> dict:
    """One line of ``outputs.jsonl``: a prompt turn, what the method made of it, and its rounds."""
    return {
        "question_id": q.question_id, "category": q.category, "turn": turn + 1, "method": method,
        "prompt_ids": prompt, "output_ids": seq.output_ids, "text": text, "provenance": seq.provenance,
        "finished_reason": seq.finished_reason, "rounds": [asdict(r) for r in seq.rounds],
    }


def job_metrics(run: MethodRun, ar: MethodRun | None, greedy: bool) -> dict[str, float]:
    """``GenerationResult.summary()`` over all the job's prompts, plus the AR comparison
    (``ar_tokens_per_s``, ``speedup``) and per-category ``tokens_per_s/<cat>``,
    ``mean_accepted_tokens_per_call/<cat>``, ``speedup/<cat>``."""
    m = GenerationResult.merge([r for _, r in run.results]).summary()
    cats = list(dict.fromkeys(c for c, _ in run.results))
    per_cat = {c: GenerationResult.merge([r for cc, r in run.results if cc == c]).summary() for c in cats}
    for c, s in per_cat.items():
        m[f"tokens_per_s/{c}"] = s["tokens_per_s"]
        m[f"mean_accepted_tokens_per_call/{c}"] = s["mean_accepted_tokens_per_call"]
    m["n_prompts"] = float(len(run.records))
    if ar is not None:
        a = GenerationResult.merge([r for _, r in ar.results]).summary()
        m["ar_tokens_per_s"] = a["tokens_per_s"]
        m["ar_wall_time_s"] = a["wall_time_s"]
        m["speedup"] = m["tokens_per_s"] / a["tokens_per_s"] if a["tokens_per_s"] > 0 else 0.0
        for c in cats:
            ar_tps = GenerationResult.merge([r for cc, r in ar.results if cc == c]).summary()["tokens_per_s"]
            m[f"ar_tokens_per_s/{c}"] = ar_tps
            m[f"speedup/{c}"] = per_cat[c]["tokens_per_s"] / ar_tps if ar_tps > 0 else 0.0
        if greedy:  # exactness check: greedy speculation must reproduce greedy decoding
            same = sum(x["output_ids"] == y["output_ids"] for x, y in zip(run.records, ar.records))
            m["ar_match_rate"] = same / len(run.records)
    return m
