"""Sweep axes: which runs lie on one line along a varied setting (one draft level's k, the
batch size, the temperature), so that a figure never joins runs that differ in anything
else, and where a line of speedups crosses 1.

A run's configuration is its method, temperature, batch size, tree, the k of each of its
draft levels and every other logged param. Runs that agree on all of it but the varied
setting form a line; a line needs two values of that setting. A figure with no line is
not drawn: ``FigureSkipped`` says why in one line (one value on the axis, or no two runs
that differ only there).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from stagedspec.metrics.run_schema import levels_of
from .runs import FigureSkipped, column, fmt, require_axis

K_PARAM = re.compile(r"^params\.levels\.[^.]+\.k$")
DERIVED = ("method", "temperature", "batch_size", "tree")
"""``configs``'s short columns; the params they are read from are left out of a run's
configuration (they would repeat them, and a repeat of the varied setting would split
every line)."""
REPEATED = (
    "params.method",
    "params.draft_k",
    "params.temperature",
    "params.sampling.temperature",
    "params.batch_size",
    "params.tree",
)
OUTCOMES = ("params.prediction.calibration", "params.tree_auto.")
"""Params a job logs about what it found, not what it was asked (the calibration prompts,
whose number follows the batch size; the tree ``tree=auto`` chose): not configuration."""
SHORT = {"temperature": "T", "batch_size": "bs", "tree": "tree", "method": "method"}


def k_label(level: str) -> str:
    """The x label of a k axis, naming the level whose k varies."""
    return f"k of level '{level}' (tokens)"


def level_ks(d: pd.DataFrame) -> pd.DataFrame:
    """``d`` (``configs`` columns) plus ``k/<level>`` per draft level: that level's k in each
    run, NaN where the run's method has no such level. The level drafting for the target
    logs its k as ``draft_k`` (the tracker leaves ``levels.<it>.k`` out as a repeat), the
    others as ``levels.<level>.k``."""
    d = d.copy()
    for level in sorted({lv for m in d["method"].unique() for lv in levels_of(m)}):
        logged = pd.to_numeric(column(d, f"params.levels.{level}.k"), errors="coerce")
        has = d["method"].map(lambda m, lv=level: lv in levels_of(m)).astype(bool)
        d[f"k/{level}"] = logged.where(d["top_level"] != level, d["draft_k"]).where(has)
    return d


def config_columns(d: pd.DataFrame) -> list[str]:
    """The columns that say what a run is (see the module's docstring)."""
    ks = [c for c in d.columns if c.startswith("k/")]
    params = [
        c
        for c in d.columns
        if c.startswith("params.") and c not in REPEATED and not K_PARAM.match(c) and not c.startswith(OUTCOMES)
    ]
    return [c for c in DERIVED if c in d.columns] + ks + params


def _text(d: pd.DataFrame) -> pd.DataFrame:
    """Each value as text, a missing one as "nan" (``astype(str)`` keeps it missing in pandas 3)."""
    return d.astype(object).map(str)


def _short(col: str) -> str:
    if col.startswith("k/"):
        return f"k({col[2:]})"
    return SHORT.get(col, col.removeprefix("params."))


def settings(r: dict) -> str:
    """A run's temperature and the k of each of its draft levels, lowest first: "T=0,
    k(ngram)=10, k(small)=12, k(copy)=24"."""
    ks = [f"k({lv})={fmt(r[f'k/{lv}'])}" for lv in levels_of(r["method"])]
    return ", ".join([f"T={fmt(r['temperature'])}", *ks])


def line_labels(d: pd.DataFrame, cols: list[str]) -> pd.Series:
    """Per row, what sets its line apart from the other lines in ``d``: the columns of
    ``cols`` that vary in ``d``, as "T=0.7, k(ngram)=3"; "" where nothing does."""
    text = _text(d[cols])
    vary = [c for c in cols if text[c].nunique() > 1]
    if not vary:
        return pd.Series("", index=d.index)
    return d[vary].apply(lambda r: ", ".join(f"{_short(c)}={fmt(r[c])}" for c in vary), axis=1)


def lines_along(d: pd.DataFrame, x: str, what: str) -> pd.DataFrame:
    """The rows of ``d`` on a line along ``x``: grouped by every other configuration column,
    the groups where ``x`` takes two or more values. Adds ``line`` (``line_labels`` over
    the kept rows, method left out: figures show it apart). Raises ``FigureSkipped`` when
    ``x`` has one value or no group has two (``what`` names ``x`` in the reason)."""
    require_axis(d, x, what)
    others = [c for c in config_columns(d) if c != x]
    key = _text(d[others]).agg("|".join, axis=1) if others else pd.Series("", index=d.index)
    spans = d.groupby(key)[x].transform("nunique")
    kept = d[(spans >= 2) & d[x].notna()].copy()
    if kept.empty:
        raise FigureSkipped(f"no two runs differ only in {what} (each setting of the rest ran at one {what})")
    kept["line"] = relabel(kept, x)
    return kept


def relabel(d: pd.DataFrame, x: str) -> pd.Series:
    """Per row, what sets its line along ``x`` apart from the other lines of the same
    method (``line_labels`` within each method; the method itself is shown apart)."""
    cols = [c for c in config_columns(d) if c not in (x, "method")]
    out = pd.Series("", index=d.index)
    for _, g in d.groupby("method", sort=False):
        out[g.index] = line_labels(g, cols)
    return out


def crossover(x, y, level: float = 1.0) -> float | None:
    """Where the line through (x, y), x increasing, first crosses ``level``, linearly
    interpolated between the two points around it; None when it stays on one side."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float) - level
    for i in range(len(x) - 1):
        if y[i] == 0:
            return float(x[i])
        if y[i] * y[i + 1] < 0:
            return float(x[i] + (x[i + 1] - x[i]) * y[i] / (y[i] - y[i + 1]))
    return float(x[-1]) if len(x) and y[-1] == 0 else None


def k_axes(d: pd.DataFrame) -> pd.DataFrame:
    """Per method and draft level whose k varies, the runs on a line along that k (one
    method at a time: different methods at different k share no axis), with
    ``axis_level`` (the level), ``k`` (its k in the run) and ``held`` (the other levels'
    k, "k(ngram)=10, k(copy)=24"); a run on two axes appears once per axis. Methods whose
    k does not vary are left out; with none left, raises ``FigureSkipped`` naming each
    method's k."""
    d = level_ks(d)
    parts = []
    for method, g in d.groupby("method", sort=True):
        for level in levels_of(method):
            try:
                on = lines_along(g, f"k/{level}", f"k of level '{level}'")
            except FigureSkipped:
                continue
            held = on.apply(
                lambda r, lv=level: ", ".join(f"k({o})={fmt(r[f'k/{o}'])}" for o in levels_of(method) if o != lv),
                axis=1,
            )
            parts.append(on.assign(axis_level=level, k=on[f"k/{level}"], held=held))
    if parts:
        return pd.concat(parts, ignore_index=True)
    fixed = [
        f"{m}: "
        + ", ".join(f"{lv} {'/'.join(fmt(k) for k in sorted(g[f'k/{lv}'].dropna().unique()))}" for lv in levels_of(m))
        for m, g in d.groupby("method", sort=True)
    ]
    if all(g[f"k/{lv}"].nunique() <= 1 for m, g in d.groupby("method") for lv in levels_of(m)):
        raise FigureSkipped(f"each method ran at one k per draft level ({'; '.join(fixed)}): no k axis to draw")
    raise FigureSkipped(f"no two runs of one method differ only in one level's k ({'; '.join(fixed)})")
