"""What a reader of the MLflow UI reads: the headline metrics and their order
(``HEADLINE``), the experiment's description (``EXPERIMENT_NOTE``) and the runs table its
shared view opens (``headline_view``), a job's and a sweep's descriptions (``child_note``,
``parent_note``, ``speedup_text``). Plain text, no MLflow: ``tracking.py`` writes it.
"""

from __future__ import annotations

from typing import Any

HEADLINE = (
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "mean_accepted_tokens_per_call",
    "acceptance_rate",
    "wasted_target_fraction",
    "tokens_per_s",
    "ar_tokens_per_s",
)
"""The numbers a reader looks for first, in this order (the CI bounds only when the job
metrics carry them)."""

EXPERIMENT_NOTE = """\
stagedspec: exact (staged) speculative decoding. Each **parent** run is one sweep
(its description: the jobs, best first; its artifacts: `report/` with the figures, once
`python -m analysis.report experiment={name}` has run); each **child** is one job: one
hierarchy (`method`, lowest level first, e.g. `ngram>small>target`), draft length `k`,
temperature `T`, on a prompt set (the Dataset column), with plain decoding on the same
prompts in the same job.

Headline metrics: `speedup` (tokens/s over plain decoding's), `speedup_ci_low/high`
(95% interval, when measured), `mean_accepted_tokens_per_call` (tokens one target call
advances), `acceptance_rate` (share of the top level's drafts the target kept),
`wasted_target_fraction` (share of target-scored positions thrown away).
`position_acceptance` is one metric with step = draft position (open it as a chart).

[Runs table with these columns, best speedup first](#/experiments/{id}/runs?viewStateShareKey={key}&workflowType=machine_learning)
"""


def headline_view() -> dict[str, Any]:
    """The runs table the experiment's shared view opens: headline columns, best first."""
    metrics = [f"metrics.`{m}`" for m in HEADLINE]
    cols = ["attributes.`Dataset`", *metrics, "params.`method`", "params.`draft_k`", "params.`temperature`"]
    return {
        "searchFilter": "",
        "orderByKey": "metrics.`speedup`",
        "orderByAsc": False,
        "selectedColumns": cols,
        # ag-grid column ids: headline metrics in HEADLINE's order (else alphabetical), names unclipped
        "columnOrder": ["attributes.`Run Name`", *cols],
        "columnWidths": {"attributes.`Run Name`": 270, "attributes.`Dataset`": 190},
    }


def _num(m: dict[str, float], key: str, fmt: str = ".2f") -> str:
    return format(m[key], fmt) if key in m else "–"


def speedup_text(m: dict[str, float]) -> str:
    """ "1.23× (95% CI 1.10–1.35)", the interval only when measured."""
    if "speedup" not in m:
        return "–"
    ci = (
        f" (95% CI {m['speedup_ci_low']:.2f}–{m['speedup_ci_high']:.2f})"
        if "speedup_ci_low" in m and "speedup_ci_high" in m
        else ""
    )
    return f"{m['speedup']:.2f}×{ci}"


def child_note(name: str, m: dict[str, float], data_text: str, max_new_tokens: int) -> str:
    """A job's description: its headline numbers in a sentence or two."""
    lines = [f"**{name}** on {data_text}, {max_new_tokens} new tokens per prompt turn.", ""]
    if "speedup" in m:
        lines.append(
            f"- **Speedup {speedup_text(m)}** over plain decoding "
            f"({_num(m, 'ar_tokens_per_s', '.1f')} → {_num(m, 'tokens_per_s', '.1f')} tokens/s)"
        )
    else:
        lines.append(f"- {_num(m, 'tokens_per_s', '.1f')} tokens/s (no plain-decoding baseline in this job)")
    if "acceptance_rate" in m:
        lines.append(
            f"- {_num(m, 'mean_accepted_tokens_per_call')} tokens per target call; acceptance "
            f"{_num(m, 'acceptance_rate')}; {100 * m.get('wasted_target_fraction', 0):.0f}% of "
            "target-scored positions discarded"
        )
    if "ar_match_rate" in m:
        line = f"- Output identical to plain decoding on {100 * m['ar_match_rate']:.0f}% of prompt turns"
        if m.get("ar_divergences"):
            line += (
                f"; the others leave it at token {m['ar_first_divergence_min']:.0f} at the earliest, where "
                f"the target's top-two logit gap was at most {m['ar_divergence_gap_steps_max']:.1f} steps of "
                "its dtype (a few steps: a near-tie that rounding flips; many: a bug; `divergence` in "
                "`outputs.jsonl`)"
            )
        lines.append(line)
    lines += [
        "",
        "Per prompt: `outputs_table.json` (artifacts); which level wrote which token: `view.html`; "
        "per position: the `position_acceptance` chart.",
    ]
    return "\n".join(lines)


def parent_note(ranked: list[Any]) -> str:
    """A sweep's description: one row per job, best speedup first."""
    rows = [
        "| job | speedup | tokens/call | acceptance | wasted target | tokens/s | plain tokens/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in ranked:
        m = r.data.metrics
        rows.append(
            f"| {r.info.run_name} | {speedup_text(m)} | {_num(m, 'mean_accepted_tokens_per_call')} | "
            f"{_num(m, 'acceptance_rate')} | {_num(m, 'wasted_target_fraction')} | "
            f"{_num(m, 'tokens_per_s', '.1f')} | {_num(m, 'ar_tokens_per_s', '.1f')} |"
        )
    best = ranked[0]
    head = (
        f"{len(ranked)} finished jobs. Best: **{best.info.run_name}**, speedup "
        f"{speedup_text(best.data.metrics)}; this run's metrics are that job's. Figures: artifacts `report/` "
        "(after `python -m analysis.report`)."
    )
    return head + "\n\n" + "\n".join(rows)
