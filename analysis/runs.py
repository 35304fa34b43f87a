"""From the runs table (``load.load_runs``) to what the figures and tables show: short
config columns, metric look-ups, and the selections several figures share. A selection
that leaves nothing to draw raises ``FigureSkipped`` with the reason."""

from __future__ import annotations

import numpy as np
import pandas as pd

from stagedspec.metrics.run_schema import top_level_of


class FigureSkipped(Exception):
    """The runs hold nothing this figure can show; the message says why."""


def fmt(v) -> str:
    """A config value as it reads in a label or note: 0.7, 4, chain."""
    if isinstance(v, (float, np.floating)):
        return f"{v:g}"
    return str(v)


def column(df: pd.DataFrame, *names: str, default=np.nan) -> pd.Series:
    """The first of ``names`` that ``df`` has, else ``default`` in every row."""
    for name in names:
        if name in df.columns:
            return df[name]
    return pd.Series(default, index=df.index)


def configs(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` plus short config columns: method, draft_k, temperature, batch_size, tree,
    top_level (the level right below the target, None for AR)."""
    d = runs.copy()
    d["method"] = column(d, "params.method", "tags.stagedspec.method").astype(str)
    d["draft_k"] = pd.to_numeric(column(d, "params.draft_k", default=0), errors="coerce").fillna(0)
    d["temperature"] = pd.to_numeric(column(d, "params.temperature", "params.sampling.temperature"), errors="coerce")
    d["batch_size"] = pd.to_numeric(column(d, "params.batch_size"), errors="coerce")
    d["tree"] = column(d, "params.tree", default="chain").astype(str)
    d["top_level"] = d["method"].map(top_level_of)
    return d


def metric(row: dict, name: str) -> float:
    value = row.get(f"metrics.{name}", np.nan)
    return float(value) if value is not None else np.nan


def speculative(runs: pd.DataFrame) -> pd.DataFrame:
    """``configs(runs)`` of the runs that drafted (AR runs left out)."""
    d = configs(runs)
    d = d[(d["draft_k"] > 0) & d["top_level"].notna()]
    if d.empty:
        raise FigureSkipped("no speculative run in this sweep (AR only)")
    return d


def at_reference_batch(d: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """Runs at the smallest batch size only: acceptance and speedup change with batch
    size, and mixing sizes on one line would average unlike things. Batch size has its
    own figure."""
    sizes = sorted(d["batch_size"].dropna().unique())
    if len(sizes) <= 1:
        return d
    ref = sizes[0]
    others = ", ".join(fmt(s) for s in sizes[1:])
    notes.append(f"Batch size {fmt(ref)} only (runs at batch size {others} are in the batch-size figure).")
    return d[d["batch_size"] == ref]


def require_axis(data: pd.DataFrame, x: str, what: str) -> None:
    """A figure whose x axis would hold one value shows no trend: raise ``FigureSkipped``
    with the one-line reason the report prints instead of drawing it."""
    values = data[x].dropna().unique()
    if len(values) < 2:
        shown = f" ({fmt(values[0])})" if len(values) else ""
        raise FigureSkipped(f"only one {what}{shown} in these runs: no axis to draw")


def ci_names(name: str) -> tuple[str, str]:
    """The interval metrics of a metric: ``speedup/qa`` -> ``speedup_ci_low/qa``, ``speedup_ci_high/qa``."""
    head, sep, tail = name.partition("/")
    return f"{head}_ci_low{sep}{tail}", f"{head}_ci_high{sep}{tail}"


def with_interval(value: float, low: float, high: float, digits: int = 2) -> str:
    """ "1.25 [0.94, 1.65]"; "1.25 [no interval]" when none was logged."""
    if value is None or pd.isna(value):
        return "–"
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return f"{value:.{digits}f} [no interval]"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def best_per_category(runs: pd.DataFrame, overall: bool = False) -> pd.DataFrame:
    """Per Spec-Bench category (``speedup/<category>``), the run with the highest speedup,
    over every run and batch size; with ``overall`` a first row "all" for ``speedup``.

    A maximum over noisy runs is biased upwards (the winner's curse), so each row also
    carries the winner's 95% interval (``ci_low``, ``ci_high``) and the runner-up; ``tie``
    is True when the runner-up's speedup lies inside the winner's interval (or the winner
    has none): the data do not tell the two apart."""
    d = configs(runs)
    names = sorted(c[len("metrics.speedup/") :] for c in d.columns if c.startswith("metrics.speedup/"))
    pairs = ([("all", "speedup")] if overall else []) + [(n, f"speedup/{n}") for n in names]
    rows = []
    for category, name in pairs:
        col = f"metrics.{name}"
        if col not in d.columns or d[col].isna().all():
            continue
        ranked = d.dropna(subset=[col]).sort_values(col, ascending=False, kind="stable")
        r = ranked.iloc[0]
        low, high = (float(r.get(f"metrics.{c}", np.nan)) for c in ci_names(name))
        second = ranked.iloc[1] if len(ranked) > 1 else None
        runner_up = float(second[col]) if second is not None else np.nan
        tie = second is not None and (np.isnan(low) or runner_up >= low)
        rows.append(
            {
                "category": category,
                "metric": name,
                "value": float(r[col]),
                "ci_low": low,
                "ci_high": high,
                "run_id": r["run_id"],
                "method": r["method"],
                "draft_k": r["draft_k"],
                "temperature": r["temperature"],
                "batch_size": r["batch_size"],
                "tree": r["tree"],
                "runner_up": runner_up,
                "runner_up_run_id": second["run_id"] if second is not None else None,
                "tie": bool(tie),
            }
        )
    return pd.DataFrame(rows)
