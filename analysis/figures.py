"""One function per report figure, over the shared pieces in ``runs.py`` (selecting runs),
``axes.py`` (which runs lie on one line along a varied setting) and ``plotting.py``
(drawing).

Each ``fig_*(runs, path) -> DataFrame`` takes the child runs from ``load.load_runs``,
writes one PNG of fixed size (700 x 450 px) and returns exactly the data it plotted as a
tidy DataFrame, one row per run (and per level / position / quantity where a run gives
several values). Values come straight from the logged metrics, so a test can compare
them with what the tracker wrote; derived columns (theory, the crossover, time from
seconds x a share) are named as such. Where several runs land on one point of a line
(e.g. repeats), the line goes through their mean and each run is drawn as a faint dot.

A line joins only runs that differ in the figure's x alone (``axes.lines_along``): the k
figures draw one method at a time, a panel per method and varied level, that level named
on the x axis. A figure whose x would have one value, or no line, is not drawn: it raises
``FigureSkipped`` with a one-line reason, which the report prints instead. Other notes a
reader needs (a restriction to one batch size, runs left off an axis) go into
``data.attrs["notes"]``.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import cycle
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from stagedspec.metrics.run_schema import TARGET, levels_of
from .axes import crossover, k_axes, k_label, level_ks, lines_along, relabel, settings
from .plotting import (
    MARKERS,
    ar_line,
    error_bars,
    figure_legend,
    finish,
    int_values,
    label,
    line_figure,
    lines,
    new_figure,
    panels,
    save,
    suptitle,
    varying,
)
from .runs import (
    FigureSkipped,
    at_reference_batch,
    best_per_category,
    column,
    configs,
    fmt,
    metric,
    require_axis,
    speculative,
)
from .theory import expected_tokens_per_call

K_ROW = ("run_id", "method", "axis_level", "k", "line", "held", "draft_k", "temperature", "batch_size")
"""Where a row of a k figure sits: its run, the panel (method, varied level), its x (that
level's k), its line and the other levels' k."""


def _on_k_axes(runs: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """The smallest batch size's speculative runs on a k axis (``axes.k_axes``); the
    methods left off (one k per level) named in a note."""
    d = at_reference_batch(speculative(runs), notes)
    on = k_axes(d)
    left = sorted(set(d["method"]) - set(on["method"]))
    if left:
        notes.append(f"Not on a k axis (each ran at one k per level): {', '.join(left)}.")
    return on


def _k_rows(d: pd.DataFrame, parts: Callable[[dict], list[tuple[str, str]]], column_name: str) -> pd.DataFrame:
    """Long format: per run on a k axis, one row per (series value, logged metric) of
    ``parts(run)``, with ``metric`` and ``value`` (the logged number, NaN rows dropped)."""
    rows = [
        {**{c: r[c] for c in K_ROW}, column_name: part, "metric": name, "value": metric(r, name)}
        for r in d.to_dict("records")
        for part, name in parts(r)
    ]
    data = pd.DataFrame(rows)
    return data if data.empty else data.dropna(subset=["value"]).reset_index(drop=True)


def _k_panels(
    data: pd.DataFrame,
    y: str,
    series: str,
    path,
    notes: list[str],
    *,
    ylabel: str,
    title: str,
    ylim: tuple[float, float] | None = None,
    more=None,
) -> pd.DataFrame:
    """One panel per method and varied level, ``y`` against that level's k (the level
    named on the x axis; the method, and the other levels' k where one line holds them, in
    the panel's title): a colour per ``series`` value, a line style per line of runs where
    a panel has several (e.g. one per temperature). ``more(ax, panel_rows, colours)``
    draws extra layers and returns their legend handles."""
    groups = list(data.groupby(["method", "axis_level"], sort=True))
    fig, axes = panels(len(groups))
    colours: dict = {}
    handles: list = []
    for i, (ax, ((method, level), g)) in enumerate(zip(axes, groups)):
        style = "line" if series != "line" and g["line"].nunique() > 1 else None
        colours, h = lines(ax, g, "k", y, [series], style_by=style, colours=colours)
        handles += h + (more(ax, g, colours) if more is not None else [])
        ax.set_xticks(int_values(g["k"]))
        ax.set_xlabel(k_label(level), fontsize=8)
        held = g["held"].unique()
        ax.set_title(method + (f"\n{held[0]}" if len(held) == 1 and held[0] else ""), fontsize=8)
        if ylim is not None:
            ax.set_ylim(*ylim)
        if i % 3 == 0:
            ax.set_ylabel(ylabel, fontsize=8)
    suptitle(fig, title)
    figure_legend(fig, handles)
    return save(fig, path, data, notes)


def fig_acceptance_vs_k(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(a) Acceptance rate (accepted / drafted) of each draft level against one level's k,
    one method at a time: different methods at different k share no axis, so each panel
    joins only runs of one method that differ in that level's k alone."""
    notes: list[str] = []
    d = _on_k_axes(runs, notes)

    def parts(r: dict) -> list[tuple[str, str]]:
        out = []
        for level in levels_of(r["method"]):
            name = f"acceptance_rate/{level}"
            if np.isnan(metric(r, name)) and level == r["top_level"]:
                name = "acceptance_rate"  # runs logged before the per-level name existed
            out.append((level, name))
        return out

    data = _k_rows(d, parts, "level")
    if data.empty:
        raise FigureSkipped("no run on a k axis logged acceptance_rate metrics")
    return _k_panels(
        data,
        "value",
        "level",
        path,
        notes,
        ylim=(0, 1.02),
        ylabel="acceptance rate (accepted / drafted)",
        title="Acceptance rate of each draft level vs one level's k",
    )


def fig_tokens_per_call_vs_k(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(b) Mean acceptance length (tokens per target call, the bonus token included: 1 +
    accepted / drafts) against one level's k, with the i.i.d. theory (dashed)
    1 + a + ... + a^d at the run's a = alpha_hat = accepted / (accepted + rejections):
    the run's ``iid_tokens_per_call`` (d = each round's own draft depth) where logged, else
    d = k of the level drafting for the target. (accepted / drafted is not a: fed to the
    formula it makes the theory fall with k by construction.)"""
    notes: list[str] = []
    d = _on_k_axes(runs, notes)
    data = (
        d[list(K_ROW)]
        .assign(
            tree=d["tree"],
            alpha_hat=column(d, "metrics.alpha_hat"),
            mean_acceptance_length=column(d, "metrics.mean_acceptance_length"),
            iid_tokens_per_call=column(d, "metrics.iid_tokens_per_call"),
        )
        .dropna(subset=["alpha_hat", "mean_acceptance_length"])
        .reset_index(drop=True)
    )
    if data.empty:
        raise FigureSkipped("no run on a k axis logged both alpha_hat and mean_acceptance_length")
    at_k = expected_tokens_per_call(data["alpha_hat"].to_numpy(), data["draft_k"].to_numpy())
    data["theoretical_tokens_per_call"] = data["iid_tokens_per_call"].fillna(pd.Series(at_k, index=data.index))
    data["line"] = data["line"].replace("", "measured")
    if (data["tree"] != "chain").any():
        notes.append("The theory assumes a chain of drafts; tree runs are plotted against it all the same.")
    gap = data["mean_acceptance_length"] / data["theoretical_tokens_per_call"] - 1
    notes.append(f"Measured vs theory: median {gap.abs().median():.1%}, worst {gap.abs().max():.1%} off.")

    def theory(ax, g: pd.DataFrame, colours: dict) -> list:
        lines(
            ax,
            g,
            "k",
            "theoretical_tokens_per_call",
            ["line"],
            colours=colours,
            labelled=False,
            name="theory: ",
            ls="--",
            marker="x",
            alpha=0.8,
        )
        return [Line2D([], [], color="grey", ls="--", marker="x", label="theory 1+α̂+…+α̂^d")]

    return _k_panels(
        data,
        "mean_acceptance_length",
        "line",
        path,
        notes,
        more=theory,
        ylabel="tokens per target call (1 + accepted / drafts)",
        title="Tokens per target call: measured (solid) vs i.i.d. theory at α̂ (dashed)",
    )


def prediction_errors(d: pd.DataFrame) -> pd.Series:
    """predicted / measured - 1 of each run's speedup."""
    return column(d, "metrics.predicted_speedup") / column(d, "metrics.speedup") - 1


def fig_speedup_vs_predicted(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(c) Measured speedup (with its 95% interval) vs the cost model's out-of-sample
    prediction, logged by each job from a calibration decode on prompts it does not evaluate
    before timing (``stagedspec/metrics/cost_model.py``): tokens per call from that
    calibration's round yields, its round time and plain decoding's time per token."""
    notes: list[str] = []
    d = speculative(runs)
    data = (
        pd.DataFrame(
            {
                "run_id": d["run_id"],
                "method": d["method"],
                "draft_k": d["draft_k"],
                "temperature": d["temperature"],
                "batch_size": d["batch_size"],
                "predicted_speedup": column(d, "metrics.predicted_speedup"),
                "speedup": column(d, "metrics.speedup"),
                "speedup_ci_low": column(d, "metrics.speedup_ci_low"),
                "speedup_ci_high": column(d, "metrics.speedup_ci_high"),
            }
        )
        .dropna(subset=["predicted_speedup", "speedup"])
        .reset_index(drop=True)
    )
    if data.empty:
        raise FigureSkipped("no speculative run logged predicted_speedup and speedup together")
    data["error"] = data["predicted_speedup"] / data["speedup"] - 1
    worst = data.loc[data["error"].abs().idxmax()]
    notes.append(
        f"Prediction error |predicted / measured - 1|: median {data['error'].abs().median():.1%}, worst "
        f"{abs(worst['error']):.1%} ({worst['method']} k={fmt(worst['draft_k'])} "
        f"T={fmt(worst['temperature'])}, run {worst['run_id'][:8]})."
    )
    notes.append(
        "Measured in the run: time per round by part, prefill, the baseline's rate. Predicted: tokens per "
        "call from α̂ and the draft depth, hence rounds, wall time and speedup."
    )

    fig, (ax,) = new_figure()
    by = varying(data, ["method", "batch_size"])
    for i, ((key, g), marker) in enumerate(zip(data.groupby(by, sort=True), cycle(MARKERS))):
        ax.scatter(g["predicted_speedup"], g["speedup"], marker=marker, s=30, color=f"C{i}", label=label(by, key))
        error_bars(ax, g, "predicted_speedup", "speedup", ("speedup_ci_low", "speedup_ci_high"), f"C{i}")
    lo = min(data["predicted_speedup"].min(), data["speedup"].min(), 1.0)
    hi = max(data["predicted_speedup"].max(), data["speedup"].max())
    pad = 0.05 * (hi - lo or 1.0)
    ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], ls="--", color="grey", lw=1, label="y = x")
    return finish(
        fig,
        ax,
        data,
        notes,
        path,
        xlabel="predicted speedup over AR (×)",
        ylabel="measured speedup over AR (×), 95% CI",
        title=f"Predicted vs measured speedup: median error {data['error'].abs().median():.0%}",
    )


def fig_wasted_vs_k(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(d) Discarded work against one level's k, one method at a time, in counts: per
    draft level the share of its drafts the level above threw away
    (``wasted_draft_fraction/<level>``), and the share of the positions the target scored
    that were thrown away (``wasted_target_fraction``)."""
    notes: list[str] = []
    d = _on_k_axes(runs, notes)
    data = _k_rows(
        d,
        lambda r: (
            [(lv, f"wasted_draft_fraction/{lv}") for lv in levels_of(r["method"])]
            + [(TARGET, "wasted_target_fraction")]
        ),
        "wasted",
    )
    if data.empty:
        raise FigureSkipped("no run on a k axis logged wasted_draft_fraction/<level> or wasted_target_fraction")
    return _k_panels(
        data,
        "value",
        "wasted",
        path,
        notes,
        ylim=(0, 1.02),
        ylabel="share of the work discarded",
        title="Discarded drafts (per level) and target positions vs one level's k",
    )


def wasted_time(r: dict, part: str) -> dict:
    """Seconds of forwards per emitted token whose work was thrown away, for draft level
    ``part`` (or the target) of run ``r``, derived from logged metrics (none logs it as
    such): seconds per unit x units in one pass x the share discarded / tokens emitted in
    that pass. Draft level: ``round_draft_forward_s/<level>`` (its forwards' seconds per
    batch round) x ``batch_rounds`` x ``wasted_draft_fraction/<level>``; target:
    ``target_call_s`` x ``target_calls`` x ``wasted_target_fraction``. The split assumes
    every drafted token (every scored position) costs the same share of its forwards."""
    if part == TARGET:
        names = ("target_call_s", "target_calls", "wasted_target_fraction")
    else:
        names = (f"round_draft_forward_s/{part}", "batch_rounds", f"wasted_draft_fraction/{part}")
    seconds, units, share = (metric(r, n) for n in names)
    emitted = metric(r, "emitted")
    return {
        "seconds_metric": names[0],
        "seconds": seconds,
        "units_metric": names[1],
        "units": units,
        "share_metric": names[2],
        "share": share,
        "emitted": emitted,
        "wasted_ms_per_token": 1000 * seconds * units * share / emitted if emitted > 0 else np.nan,
    }


def fig_wasted_time_vs_k(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(e) Discarded work in time against one level's k, one method at a time: per draft
    level and for the target, milliseconds of forwards per emitted token spent on drafts
    or positions that were thrown away (``wasted_time``: derived, logged seconds x the
    logged share discarded)."""
    notes: list[str] = []
    d = _on_k_axes(runs, notes)
    rows = [
        {**{c: r[c] for c in K_ROW}, "wasted": part, **wasted_time(r, part)}
        for r in d.to_dict("records")
        for part in [*levels_of(r["method"]), TARGET]
    ]
    data = pd.DataFrame(rows)
    if data.empty or data["wasted_ms_per_token"].isna().all():
        raise FigureSkipped(
            "no run on a k axis logged the seconds, counts and emitted tokens a time needs "
            "(round_draft_forward_s/<level>, batch_rounds, target_call_s, target_calls, emitted)"
        )
    data = data.dropna(subset=["wasted_ms_per_token"]).reset_index(drop=True)
    notes.append(
        "Derived, not logged: a level's forward seconds per batch round × batch rounds × its share of "
        "drafts discarded, and the target's seconds per forward × forwards × its share of scored positions "
        "discarded, per emitted token. Each drafted token (scored position) is charged an equal share of "
        "its forwards; on a CPU a forward's cost grows less than linearly with the positions it scores, so "
        "the target's part overstates what scoring fewer positions would save."
    )
    return _k_panels(
        data,
        "wasted_ms_per_token",
        "wasted",
        path,
        notes,
        ylabel="ms per emitted token on discarded work",
        title="Discarded work in time (derived) vs one level's k",
    )


def _speedup_table(d: pd.DataFrame) -> pd.DataFrame:
    return (
        pd.DataFrame(
            {
                "run_id": d["run_id"],
                "method": d["method"],
                "draft_k": d["draft_k"],
                "temperature": d["temperature"],
                "batch_size": d["batch_size"],
                "tree": d["tree"],
                "line": column(d, "line", default=""),
                "speedup": column(d, "metrics.speedup"),
                "speedup_ci_low": column(d, "metrics.speedup_ci_low"),
                "speedup_ci_high": column(d, "metrics.speedup_ci_high"),
                "tokens_per_s": column(d, "metrics.tokens_per_s"),
                "tokens_per_s_ci_low": column(d, "metrics.tokens_per_s_ci_low"),
                "tokens_per_s_ci_high": column(d, "metrics.tokens_per_s_ci_high"),
                "ar_tokens_per_s": column(d, "metrics.ar_tokens_per_s"),
                "ar_tokens_per_s_ci_low": column(d, "metrics.ar_tokens_per_s_ci_low"),
                "ar_tokens_per_s_ci_high": column(d, "metrics.ar_tokens_per_s_ci_high"),
            }
        )
        .dropna(subset=["speedup"])
        .reset_index(drop=True)
    )


def _with_speedup(d: pd.DataFrame) -> pd.DataFrame:
    if "metrics.speedup" not in d or d["metrics.speedup"].isna().all():
        raise FigureSkipped("no speculative run logged speedup")
    return d.dropna(subset=["metrics.speedup"])


def fig_speedup_vs_temperature(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(f) Speedup over AR vs sampling temperature, one line per method (and per other
    setting where a method ran several), each through runs that differ only in T."""
    notes: list[str] = []
    d = _with_speedup(at_reference_batch(speculative(runs), notes))
    on = lines_along(level_ks(d), "temperature", "temperature")
    if len(on) < len(d):
        notes.append(f"{len(d) - len(on)} run(s) at one temperature for their settings (e.g. a k axis) not drawn.")
    data = _speedup_table(on)[
        [
            "run_id",
            "method",
            "draft_k",
            "temperature",
            "batch_size",
            "tree",
            "line",
            "speedup",
            "speedup_ci_low",
            "speedup_ci_high",
        ]
    ]
    notes.append("Bars: each run's 95% interval.")
    return line_figure(
        data,
        "temperature",
        "speedup",
        ["method", "line"],
        path,
        notes,
        xticks=sorted(data["temperature"].unique()),
        more=lambda ax, colours: [ar_line(ax)],
        xlabel="sampling temperature T (0 = greedy)",
        ylabel="speedup over AR (×), 95% CI",
        title="Speedup over AR vs sampling temperature",
        err=("speedup_ci_low", "speedup_ci_high"),
    )


def _best_lines(on: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """Of the lines along batch size, the one with the highest mean speedup per method and
    temperature (with every k as well the panels become unreadable; the others are in
    the runs table), relabelled among the lines kept; a note gives each one's settings."""
    mean = on.groupby(["method", "temperature", "line"])["metrics.speedup"].mean().reset_index()
    best = mean.loc[mean.groupby(["method", "temperature"])["metrics.speedup"].idxmax(), ["method", "line"]]
    kept = on.merge(best, on=["method", "line"])
    kept = kept.assign(line=relabel(kept, "batch_size").to_numpy())
    for r in kept.drop_duplicates(["method", "line"]).to_dict("records"):
        notes.append(f"{label(['method', 'line'], (r['method'], r['line']))}: {settings(r)}.")
    return kept


def _mark_crossovers(ax, data: pd.DataFrame, by: list[str], colours: dict, notes: list[str]) -> pd.Series:
    """Per line, the batch size where its mean speedup crosses 1 (``axes.crossover``,
    linear between the two sizes around it), marked as a dotted vertical line and named in
    a note; "no crossover in 1..B" otherwise. Returns the crossover of each row's line."""
    out = pd.Series(np.nan, index=data.index)
    for key, g in data.groupby(by, sort=True):
        mean = g.groupby("batch_size")["speedup"].mean().sort_index()
        x = crossover(mean.index, mean.to_numpy())
        lo, hi = fmt(mean.index[0]), fmt(mean.index[-1])
        if x is None:
            pays = "pays at every size" if mean.iloc[0] > 1 else "does not pay at any size"
            notes.append(f"{label(by, key)}: no crossover in {lo}..{hi} (speculation {pays} measured).")
            continue
        out[g.index] = x
        ax.axvline(x, color=colours[key], ls=":", lw=1.2, label=f"crossover {label(by, key)}: B≈{x:.3g}")
        ax.plot([x], [1.0], marker="X", ms=8, color=colours[key], ls="none")
        ax.annotate(f"B≈{x:.3g}", (x, 1.0), xytext=(8, 8), textcoords="offset points", fontsize=8, color=colours[key])
        notes.append(
            f"{label(by, key)}: speedup crosses 1 at batch size ≈ {x:.3g} (linear between the sizes "
            f"around it); speculation stops paying there."
            if mean.iloc[0] > 1
            else f"{label(by, key)}: speedup crosses 1 at batch size ≈ {x:.3g}; speculation starts paying there."
        )
    return out


def _throughput(ax, data: pd.DataFrame, by: list[str], colours: dict, notes: list[str]) -> None:
    """Speculative (solid) vs AR (dashed, the same job's interleaved baseline) tokens/s."""
    has = data[["tokens_per_s", "ar_tokens_per_s"]].notna().all(axis=1)
    if not has.any():
        notes.append("No run logged tokens_per_s and ar_tokens_per_s: right panel empty.")
        return
    tps = data[has]
    lines(
        ax,
        tps,
        "batch_size",
        "tokens_per_s",
        by,
        colours=colours,
        labelled=False,
        name="spec: ",
        err=("tokens_per_s_ci_low", "tokens_per_s_ci_high"),
    )
    lines(
        ax,
        tps,
        "batch_size",
        "ar_tokens_per_s",
        by,
        colours=colours,
        labelled=False,
        name="AR: ",
        ls="--",
        marker="x",
        err=("ar_tokens_per_s_ci_low", "ar_tokens_per_s_ci_high"),
    )
    ax.legend(
        handles=[
            Line2D([], [], color="grey", marker="o", label="speculative"),
            Line2D([], [], color="grey", ls="--", marker="x", label="AR, same job"),
        ],
        fontsize=8,
    )


def fig_speedup_vs_batch_size(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(g) Speedup vs batch size (left, the crossover where it falls below 1 marked) and
    tokens/s, speculative vs AR (right), per method and temperature: the line of runs that
    differ only in batch size with the highest mean speedup."""
    notes: list[str] = []
    on = lines_along(level_ks(_with_speedup(speculative(runs))), "batch_size", "batch size")
    notes.append(
        "Per method and temperature, the line of runs (differing only in batch size) with the highest "
        "mean speedup; bars: each run's 95% interval."
    )
    data = _speedup_table(_best_lines(on, notes)).sort_values(["method", "temperature", "batch_size"])
    data = data.reset_index(drop=True)
    fig, (left, right) = new_figure(ncols=2)
    by = ["method", "line"]
    colours, handles = lines(left, data, "batch_size", "speedup", by, err=("speedup_ci_low", "speedup_ci_high"))
    handles.append(ar_line(left))
    data["crossover_batch_size"] = _mark_crossovers(left, data, by, colours, notes)
    _throughput(right, data, by, colours, notes)
    sizes = sorted(data["batch_size"].unique())
    for ax in (left, right):
        if sizes[-1] / sizes[0] > 16:  # up to 16 linear: the crossover is interpolated linearly in B
            ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [fmt(s) for s in sizes])
        ax.set_xlabel("batch size (sequences)")
    left.set_ylabel("speedup over AR (×)")
    right.set_ylabel("throughput (tokens/s)")
    left.set_title("Speedup (X: crossover)", fontsize=10)
    right.set_title("Throughput", fontsize=10)
    suptitle(fig, "Speedup and throughput vs batch size")
    fig.legend(handles=handles, loc="outside lower center", ncol=min(3, len(handles)), fontsize=7)
    return save(fig, path, data, notes)


def _rate_figure(
    data: pd.DataFrame, x: str, series: list[str], keep: tuple[str, ...], path, notes, **text: str
) -> pd.DataFrame:
    """Rates in [0, 1] against an integer x, one line per series, a line style per
    temperature when there are several."""
    style = "temperature" if data["temperature"].nunique() > 1 else None
    return line_figure(
        data,
        x,
        "value",
        varying(data, series, keep=keep),
        path,
        notes,
        xticks=int_values(data[x]),
        style_by=style,
        ylim=(0, 1.02),
        **text,
    )


def fig_position_acceptance(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(h) Acceptance at each draft position i = 1..k, one line per k."""
    notes: list[str] = []
    d = at_reference_batch(speculative(runs), notes)
    prefix = "metrics.position_acceptance/"
    cols = [c for c in d.columns if c.startswith(prefix)]
    rows = []
    for r in d.to_dict("records"):
        for c in cols:
            if pd.notna(r[c]):
                rows.append(
                    {
                        "run_id": r["run_id"],
                        "method": r["method"],
                        "draft_k": r["draft_k"],
                        "temperature": r["temperature"],
                        "batch_size": r["batch_size"],
                        "position": int(c[len(prefix) :]),
                        "metric": c[len("metrics.") :],
                        "value": float(r[c]),
                    }
                )
    data = pd.DataFrame(rows)
    if data.empty:
        raise FigureSkipped("no speculative run logged position_acceptance/<i>")
    data = data.sort_values(["method", "draft_k", "temperature", "position"]).reset_index(drop=True)
    require_axis(data, "position", "draft position")
    return _rate_figure(
        data,
        "position",
        ["method", "draft_k"],
        ("draft_k",),
        path,
        notes,
        xlabel="draft position i (1 = first drafted token)",
        ylabel="acceptance at position i",
        title="Acceptance at each draft position",
    )


def fig_category_speedup(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(i) Best speedup per Spec-Bench category, each bar labelled with its config."""
    notes: list[str] = []
    data = best_per_category(runs)
    if data.empty:
        raise FigureSkipped("no run logged speedup/<category> metrics")
    require_axis(data, "category", "category")

    fig, (ax,) = new_figure()
    x = np.arange(len(data))
    bars = ax.bar(x, data["value"], color="C0", width=0.6, label="best run (95% CI)")
    error_bars(ax, data.assign(x=x), "x", "value", ("ci_low", "ci_high"), "black", alpha=0.8)
    runner = data["runner_up"].notna()
    if runner.any():
        ax.scatter(
            x[runner.to_numpy()],
            data.loc[runner, "runner_up"],
            marker="_",
            s=200,
            color="C3",
            label="runner-up",
            zorder=3,
        )
    several_methods = data["method"].nunique() > 1
    top_of = data[["value", "ci_high"]].max(axis=1)
    for bar, r, y in zip(bars, data.to_dict("records"), top_of):
        text = f"k={fmt(r['draft_k'])} T={fmt(r['temperature'])}\nbs={fmt(r['batch_size'])}"
        if several_methods:
            text = f"{r['method']}\n{text}"
        if r["tie"]:
            text += "\n(tie)"
        ax.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, y),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=7,
        )
    if data["tie"].any():
        notes.append(
            "(tie): the runner-up lies inside the winner's 95% interval (or the winner has none): "
            "the data do not tell them apart."
        )
    ar_line(ax)
    ax.set_xticks(x, data["category"], rotation=30 if len(data) > 6 else 0, ha="right" if len(data) > 6 else "center")
    ax.grid(False, axis="x")
    top = data.loc[data["value"].idxmax()]
    return finish(
        fig,
        ax,
        data,
        notes,
        path,
        xlabel="Spec-Bench category",
        ylabel="speedup over AR (×)",
        title=f"Best speedup per category (highest: {top['category']}, {top['value']:.2f}×)",
        ylim=(0, top_of.max() * 1.3),
    )


def fig_provenance(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(j) Share of emitted tokens proposed by each level (target = its own tokens),
    one stacked bar per run configuration."""
    notes: list[str] = []
    d = at_reference_batch(configs(runs), notes)
    prefix = "metrics.provenance/"
    rows = []
    for r in d.sort_values(["method", "draft_k", "temperature"]).to_dict("records"):
        order = levels_of(r["method"]) + [TARGET]
        extra = sorted(c[len(prefix) :] for c in r if c.startswith(prefix) and c[len(prefix) :] not in order)
        config = (
            f"{r['method']}  k={fmt(r['draft_k'])} T={fmt(r['temperature'])}"
            if pd.notna(r["top_level"])
            else f"{r['method']} (AR)  T={fmt(r['temperature'])}"
        )
        for level in order + extra:
            value = metric(r, f"provenance/{level}")
            if not np.isnan(value):
                rows.append(
                    {
                        "run_id": r["run_id"],
                        "config": config,
                        "method": r["method"],
                        "draft_k": r["draft_k"],
                        "temperature": r["temperature"],
                        "batch_size": r["batch_size"],
                        "level": level,
                        "metric": f"provenance/{level}",
                        "value": value,
                    }
                )
    data = pd.DataFrame(rows)
    if data.empty:
        raise FigureSkipped("no run logged provenance/<level> metrics")

    fig, (ax,) = new_figure()
    # Colours follow the hierarchy, bottom level first, target last, the same in every bar.
    level_order = list(
        dict.fromkeys([lv for m in data["method"].unique() for lv in levels_of(m)] + list(data["level"].unique()))
    )
    level_order = [lv for lv in level_order if lv != TARGET] + [TARGET]
    runs_order = list(dict.fromkeys(data["run_id"]))
    y = {run_id: i for i, run_id in enumerate(runs_order)}
    left = np.zeros(len(runs_order))
    for i, level in enumerate(level_order):
        part = data[data["level"] == level]
        if part.empty:
            continue
        widths = np.zeros(len(runs_order))
        widths[[y[r] for r in part["run_id"]]] = part["value"].to_numpy()
        ax.barh(
            np.arange(len(runs_order)),
            widths,
            left=left,
            height=0.7,
            label=level,
            color="0.6" if level == TARGET else f"C{i}",
        )
        left += widths
    labels = data.drop_duplicates("run_id").set_index("run_id").loc[runs_order, "config"]
    ax.set_yticks(np.arange(len(runs_order)), labels, fontsize=7 if len(runs_order) > 8 else 8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(1.0, left.max()))
    ax.set_xlabel("share of emitted tokens proposed by each level (fraction)")
    ax.set_ylabel("run configuration")
    suptitle(fig, "Who proposed the emitted tokens")
    ax.grid(False, axis="y")
    fig.legend(loc="outside right center", fontsize=8, title="proposed by", title_fontsize=8)
    return save(fig, path, data, notes)


FigureFn = Callable[[pd.DataFrame, str | Path], pd.DataFrame]

# name -> (function, heading, caption); the report draws them in this order.
FIGURES: dict[str, tuple[FigureFn, str, str]] = {
    "acceptance_vs_k": (
        fig_acceptance_vs_k,
        "Acceptance rate per level vs draft length",
        "Acceptance rate (accepted / drafted) of each draft level vs the k of one level, a panel per method "
        "and varied level (named on the x axis); a line joins runs that differ in that k alone.",
    ),
    "tokens_per_call_vs_k": (
        fig_tokens_per_call_vs_k,
        "Tokens per target call vs draft length, with theory",
        "Mean acceptance length (1 + accepted / drafts: tokens per target call, bonus included) vs one level's "
        "k, a panel per method and varied level; dashed: the i.i.d. theory 1 + α̂ + … + α̂^d at each run's "
        "α̂ = accepted / (accepted + rejections), d each round's draft depth (`iid_tokens_per_call`; d = k of "
        "the level drafting for the target where that is not logged).",
    ),
    "speedup_vs_predicted": (
        fig_speedup_vs_predicted,
        "Measured vs predicted speedup",
        "Measured speedup (bars: 95% interval) vs the out-of-sample prediction each job made before timing "
        "(`predicted_speedup`: a short decode of prompts the job does not evaluate, with the method and "
        "plain decoding; tokens per call from those rounds' yields, their round and step times, plus "
        "prefill); dashed: y = x.",
    ),
    "wasted_vs_k": (
        fig_wasted_vs_k,
        "Wasted compute vs draft length",
        "Per draft level, the share of its drafts the level above discarded (wasted_draft_fraction/<level>), "
        "and the share of target-scored positions discarded (wasted_target_fraction), vs one level's k, a "
        "panel per method and varied level.",
    ),
    "wasted_time_vs_k": (
        fig_wasted_time_vs_k,
        "Wasted compute in time vs draft length",
        "Milliseconds per emitted token of each level's forwards (and the target's) spent on drafts (positions) "
        "that were discarded, vs one level's k: derived as logged seconds × the logged share discarded, each "
        "drafted token (scored position) charged an equal share of its forwards.",
    ),
    "speedup_vs_temperature": (
        fig_speedup_vs_temperature,
        "Speedup vs temperature",
        "Speedup over AR (tokens/s ÷ AR tokens/s in the same job, interleaved per batch) vs sampling "
        "temperature, one line per method through runs that differ in temperature alone; bars: 95% "
        "intervals.",
    ),
    "speedup_vs_batch_size": (
        fig_speedup_vs_batch_size,
        "Speedup vs batch size",
        "Left: speedup over AR vs batch size, the batch size where speculation stops paying (speedup crosses 1, "
        "linear between the two sizes around it) marked X and dotted. Right: speculative (solid) vs AR (dashed) "
        "tokens/s. A line joins runs that differ in batch size alone. Bars: 95% intervals.",
    ),
    "position_acceptance": (
        fig_position_acceptance,
        "Per-position acceptance",
        "Of the rounds that tested a draft token at depth i (the walk got there and the node had "
        "children), the share that accepted one (position_acceptance/i).",
    ),
    "category_speedup": (
        fig_category_speedup,
        "Speedup per Spec-Bench category",
        "Best speedup per Spec-Bench category over all runs with its 95% interval, each bar labelled with "
        "its config; red: the runner-up (a maximum over noisy runs is biased upwards).",
    ),
    "provenance": (
        fig_provenance,
        "Provenance of emitted tokens",
        "Share of emitted tokens proposed by each level; target = the target's own tokens.",
    ),
}
