"""One function per report figure, over the shared pieces in ``runs.py`` (selecting runs)
and ``plotting.py`` (drawing).

Each ``fig_*(runs, path) -> DataFrame`` takes the child runs from ``load.load_runs``,
writes one PNG of fixed size (700 x 450 px) and returns exactly the data it plotted as a
tidy DataFrame, one row per run (and per level / position / quantity where a run gives
several values). Values come straight from the logged metrics, so a test can compare
them with what the tracker wrote; derived columns (theory, the prediction) are named as
such. Where several runs land on one point of a line (e.g. repeats), the line goes
through their mean and each run is drawn as a faint dot.

Notes a reader needs (a restriction to one batch size, an x variable with one value) go
into ``data.attrs["notes"]``; a figure that cannot be drawn raises ``FigureSkipped``
with the reason, and the report prints it instead of the figure.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import cycle
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from stagedspec.metrics.run_schema import TARGET, levels_of
from .plotting import (
    MARKERS,
    ar_line,
    error_bars,
    finish,
    int_values,
    label,
    line_figure,
    lines,
    new_figure,
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
    single_x_note,
    speculative,
)
from .theory import expected_tokens_per_call

DRAFT_K_AXIS = "draft length k of the level below the target (tokens)"


def _rate_figure(data: pd.DataFrame, x: str, series: list[str], keep: tuple[str, ...], path, notes,
                 **text: str) -> pd.DataFrame:
    """Rates in [0, 1] against an integer x, one line per series, a line style per
    temperature when there are several."""
    style = "temperature" if data["temperature"].nunique() > 1 else None
    return line_figure(data, x, "value", varying(data, series, keep=keep), path, notes,
                       xticks=int_values(data[x]), style_by=style, ylim=(0, 1.02), **text)


def fig_acceptance_vs_k(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(a) Acceptance rate of each draft level vs the draft length k of the top level."""
    notes: list[str] = []
    d = at_reference_batch(speculative(runs), notes)
    rows = []
    for r in d.to_dict("records"):
        for level in levels_of(r["method"]):
            name = f"acceptance_rate/{level}"
            value = metric(r, name)
            if np.isnan(value) and level == r["top_level"]:
                name, value = "acceptance_rate", metric(r, "acceptance_rate")
            rows.append({"run_id": r["run_id"], "method": r["method"], "level": level,
                         "draft_k": r["draft_k"], "temperature": r["temperature"],
                         "batch_size": r["batch_size"], "metric": name, "value": value})
    data = pd.DataFrame(rows)
    if data.empty or data["value"].isna().all():
        raise FigureSkipped("no speculative run logged acceptance_rate metrics")
    data = data.dropna(subset=["value"]).reset_index(drop=True)
    single_x_note(data, "draft_k", "draft length", notes)
    return _rate_figure(data, "draft_k", ["method", "level"], ("level",), path, notes,
                        xlabel=DRAFT_K_AXIS, ylabel="acceptance rate (accepted / drafted)",
                        title="Acceptance rate of each draft level vs draft length")


def fig_tokens_per_call_vs_k(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(b) Mean acceptance length (tokens per target call, the bonus token included: 1 +
    accepted / drafts) vs k, with the i.i.d. theory (dashed) 1 + a + ... + a^k at each
    run's a = alpha_hat = accepted / (accepted + rejections). (accepted / drafted is not a:
    fed to the formula it makes the theory fall with k by construction.)"""
    notes: list[str] = []
    d = at_reference_batch(speculative(runs), notes)
    data = pd.DataFrame({
        "run_id": d["run_id"], "method": d["method"], "draft_k": d["draft_k"],
        "temperature": d["temperature"], "batch_size": d["batch_size"], "tree": d["tree"],
        "alpha_hat": column(d, "metrics.alpha_hat"),
        "mean_acceptance_length": column(d, "metrics.mean_acceptance_length"),
    }).dropna(subset=["alpha_hat", "mean_acceptance_length"])
    if data.empty:
        raise FigureSkipped("no speculative run logged both alpha_hat and mean_acceptance_length")
    data["theoretical_tokens_per_call"] = expected_tokens_per_call(
        data["alpha_hat"].to_numpy(), data["draft_k"].to_numpy())
    data = data.reset_index(drop=True)
    if (data["tree"] != "chain").any():
        notes.append("The theory assumes a chain of drafts; tree runs are plotted against it all the same.")
    gap = data["mean_acceptance_length"] / data["theoretical_tokens_per_call"] - 1
    notes.append(f"Measured vs theory: median {gap.abs().median():.1%}, worst {gap.abs().max():.1%} off.")
    single_x_note(data, "draft_k", "draft length", notes)
    by = varying(data, ["method", "temperature"])

    def theory(ax, colours: dict) -> list:
        lines(ax, data, "draft_k", "theoretical_tokens_per_call", by, colours=colours,
              labelled=False, ls="--", marker="x", alpha=0.8)
        return [Line2D([], [], color="grey", ls="--", marker="x", label="theory 1+α̂+…+α̂^k")]

    return line_figure(data, "draft_k", "mean_acceptance_length", by, path, notes,
                       xticks=int_values(data["draft_k"]), more=theory, xlabel=DRAFT_K_AXIS,
                       ylabel="tokens per target call (1 + accepted / drafts)",
                       title="Tokens per target call: measured (solid) vs i.i.d. theory at α̂ (dashed)")


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
    data = pd.DataFrame({
        "run_id": d["run_id"], "method": d["method"], "draft_k": d["draft_k"], "temperature": d["temperature"],
        "batch_size": d["batch_size"], "predicted_speedup": column(d, "metrics.predicted_speedup"),
        "speedup": column(d, "metrics.speedup"), "speedup_ci_low": column(d, "metrics.speedup_ci_low"),
        "speedup_ci_high": column(d, "metrics.speedup_ci_high"),
    }).dropna(subset=["predicted_speedup", "speedup"]).reset_index(drop=True)
    if data.empty:
        raise FigureSkipped("no speculative run logged predicted_speedup and speedup together")
    data["error"] = data["predicted_speedup"] / data["speedup"] - 1
    worst = data.loc[data["error"].abs().idxmax()]
    notes.append(f"Prediction error |predicted / measured - 1|: median {data['error'].abs().median():.1%}, worst "
                 f"{abs(worst['error']):.1%} ({worst['method']} k={fmt(worst['draft_k'])} "
                 f"T={fmt(worst['temperature'])}, run {worst['run_id'][:8]}).")
    notes.append("Measured in the run: time per round by part, prefill, the baseline's rate. Predicted: tokens per "
                 "call from α̂ and the draft depth, hence rounds, wall time and speedup.")

    fig, (ax,) = new_figure()
    by = varying(data, ["method", "batch_size"])
    for i, ((key, g), marker) in enumerate(zip(data.groupby(by, sort=True), cycle(MARKERS))):
        ax.scatter(g["predicted_speedup"], g["speedup"], marker=marker, s=30, color=f"C{i}", label=label(by, key))
        error_bars(ax, g, "predicted_speedup", "speedup", ("speedup_ci_low", "speedup_ci_high"), f"C{i}")
    lo = min(data["predicted_speedup"].min(), data["speedup"].min(), 1.0)
    hi = max(data["predicted_speedup"].max(), data["speedup"].max())
    pad = 0.05 * (hi - lo or 1.0)
    ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], ls="--", color="grey", lw=1, label="y = x")
    return finish(fig, ax, data, notes, path, xlabel="predicted speedup over AR (×)",
                  ylabel="measured speedup over AR (×), 95% CI",
                  title=f"Predicted vs measured speedup: median error {data['error'].abs().median():.0%}")


def fig_wasted_vs_k(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(d) Discarded compute vs k: share of the top level's drafts thrown away, and share
    of target-scored positions thrown away."""
    notes: list[str] = []
    d = at_reference_batch(speculative(runs), notes)
    rows = []
    for r in d.to_dict("records"):
        for wasted, name in (("draft (level below target)", f"wasted_draft_fraction/{r['top_level']}"),
                             ("target", "wasted_target_fraction")):
            rows.append({"run_id": r["run_id"], "method": r["method"], "draft_k": r["draft_k"],
                         "temperature": r["temperature"], "batch_size": r["batch_size"],
                         "wasted": wasted, "metric": name, "value": metric(r, name)})
    data = pd.DataFrame(rows)
    if data.empty or data["value"].isna().all():
        raise FigureSkipped("no speculative run logged wasted_draft_fraction/<level> or wasted_target_fraction")
    data = data.dropna(subset=["value"]).reset_index(drop=True)
    single_x_note(data, "draft_k", "draft length", notes)
    return line_figure(data, "draft_k", "value", varying(data, ["method", "temperature"]), path, notes,
                       xticks=int_values(data["draft_k"]), style_by="wasted", ylim=(0, 1.02),
                       xlabel=DRAFT_K_AXIS, ylabel="fraction of compute discarded",
                       title="Discarded draft tokens and target positions vs draft length")


def _speedup_table(d: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "run_id": d["run_id"], "method": d["method"], "draft_k": d["draft_k"],
        "temperature": d["temperature"], "batch_size": d["batch_size"], "tree": d["tree"],
        "speedup": column(d, "metrics.speedup"),
        "speedup_ci_low": column(d, "metrics.speedup_ci_low"), "speedup_ci_high": column(d, "metrics.speedup_ci_high"),
        "tokens_per_s": column(d, "metrics.tokens_per_s"),
        "tokens_per_s_ci_low": column(d, "metrics.tokens_per_s_ci_low"),
        "tokens_per_s_ci_high": column(d, "metrics.tokens_per_s_ci_high"),
        "ar_tokens_per_s": column(d, "metrics.ar_tokens_per_s"),
        "ar_tokens_per_s_ci_low": column(d, "metrics.ar_tokens_per_s_ci_low"),
        "ar_tokens_per_s_ci_high": column(d, "metrics.ar_tokens_per_s_ci_high"),
    }).dropna(subset=["speedup"]).reset_index(drop=True)


def fig_speedup_vs_temperature(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(e) Speedup over AR vs sampling temperature, one line per method and k."""
    notes: list[str] = []
    data = _speedup_table(at_reference_batch(speculative(runs), notes))
    if data.empty:
        raise FigureSkipped("no speculative run logged speedup")
    data = data[["run_id", "method", "draft_k", "temperature", "batch_size", "tree", "speedup", "speedup_ci_low",
                 "speedup_ci_high"]]
    single_x_note(data, "temperature", "temperature", notes)
    notes.append("Bars: each run's 95% interval.")
    return line_figure(data, "temperature", "speedup", varying(data, ["method", "draft_k", "tree"], keep=("draft_k",)),
                       path, notes, xticks=sorted(data["temperature"].unique()),
                       more=lambda ax, colours: [ar_line(ax)], xlabel="sampling temperature T (0 = greedy)",
                       ylabel="speedup over AR (×), 95% CI", title="Speedup over AR vs sampling temperature",
                       err=("speedup_ci_low", "speedup_ci_high"))


def fig_speedup_vs_batch_size(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(f) Speedup vs batch size (left) and tokens/s, speculative vs AR (right), for each
    method and temperature at its best draft config (highest mean speedup over sizes)."""
    notes: list[str] = []
    all_runs = _speedup_table(speculative(runs))
    if all_runs.empty:
        raise FigureSkipped("no speculative run logged speedup")
    # One line per (method, T): with every k as well the panels become unreadable; the
    # other k are in the overall table.
    mean = all_runs.groupby(["method", "temperature", "draft_k", "tree"], dropna=False)["speedup"].mean()
    best = mean.reset_index().loc[lambda m: m.groupby(["method", "temperature"], dropna=False)["speedup"].idxmax()]
    data = all_runs.merge(best[["method", "temperature", "draft_k", "tree"]], how="inner")
    data = data.sort_values(["method", "temperature", "batch_size"]).reset_index(drop=True)
    notes.append("Per method and temperature, the draft config with the highest mean speedup over batch sizes.")
    single_x_note(data, "batch_size", "batch size", notes)

    fig, (left, right) = new_figure(ncols=2)
    by = varying(data, ["method", "temperature"], keep=("temperature",)) + ["draft_k"]
    if data["tree"].nunique() > 1:
        by.append("tree")
    colours, handles = lines(left, data, "batch_size", "speedup", by, err=("speedup_ci_low", "speedup_ci_high"))
    handles.append(ar_line(left))
    notes.append("Bars: each run's 95% interval.")
    has_tps = data[["tokens_per_s", "ar_tokens_per_s"]].notna().all(axis=1)
    if has_tps.any():
        tps = data[has_tps]
        lines(right, tps, "batch_size", "tokens_per_s", by, colours=colours, labelled=False,
              err=("tokens_per_s_ci_low", "tokens_per_s_ci_high"))
        lines(right, tps, "batch_size", "ar_tokens_per_s", by, colours=colours, labelled=False, ls="--", marker="x",
              err=("ar_tokens_per_s_ci_low", "ar_tokens_per_s_ci_high"))
        right.legend(handles=[Line2D([], [], color="grey", marker="o", label="speculative"),
                              Line2D([], [], color="grey", ls="--", marker="x", label="AR, same job")],
                     fontsize=8)
    else:
        notes.append("No run logged tokens_per_s and ar_tokens_per_s: right panel empty.")
    sizes = sorted(data["batch_size"].unique())
    for ax in (left, right):
        if len(sizes) > 1 and sizes[-1] / sizes[0] >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [fmt(s) for s in sizes])
        ax.set_xlabel("batch size (sequences)")
    left.set_ylabel("speedup over AR (×)")
    right.set_ylabel("throughput (tokens/s)")
    left.set_title("Speedup", fontsize=10)
    right.set_title("Throughput", fontsize=10)
    suptitle(fig, "Speedup and throughput vs batch size (best draft config per line)")
    fig.legend(handles=handles, loc="outside lower center", ncol=min(3, len(handles)), fontsize=7)
    return save(fig, path, data, notes)


def fig_position_acceptance(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(g) Acceptance at each draft position i = 1..k, one line per k."""
    notes: list[str] = []
    d = at_reference_batch(speculative(runs), notes)
    prefix = "metrics.position_acceptance/"
    cols = [c for c in d.columns if c.startswith(prefix)]
    rows = []
    for r in d.to_dict("records"):
        for c in cols:
            if pd.notna(r[c]):
                rows.append({"run_id": r["run_id"], "method": r["method"], "draft_k": r["draft_k"],
                             "temperature": r["temperature"], "batch_size": r["batch_size"],
                             "position": int(c[len(prefix):]), "metric": c[len("metrics."):],
                             "value": float(r[c])})
    data = pd.DataFrame(rows)
    if data.empty:
        raise FigureSkipped("no speculative run logged position_acceptance/<i>")
    data = data.sort_values(["method", "draft_k", "temperature", "position"]).reset_index(drop=True)
    single_x_note(data, "position", "draft position", notes)
    return _rate_figure(data, "position", ["method", "draft_k"], ("draft_k",), path, notes,
                        xlabel="draft position i (1 = first drafted token)", ylabel="acceptance at position i",
                        title="Acceptance at each draft position")


def fig_category_speedup(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(h) Best speedup per Spec-Bench category, each bar labelled with its config."""
    notes: list[str] = []
    data = best_per_category(runs)
    if data.empty:
        raise FigureSkipped("no run logged speedup/<category> metrics")
    single_x_note(data, "category", "category", notes)

    fig, (ax,) = new_figure()
    x = np.arange(len(data))
    bars = ax.bar(x, data["value"], color="C0", width=0.6, label="best run (95% CI)")
    error_bars(ax, data.assign(x=x), "x", "value", ("ci_low", "ci_high"), "black", alpha=0.8)
    runner = data["runner_up"].notna()
    if runner.any():
        ax.scatter(x[runner.to_numpy()], data.loc[runner, "runner_up"], marker="_", s=200, color="C3",
                   label="runner-up", zorder=3)
    several_methods = data["method"].nunique() > 1
    top_of = data[["value", "ci_high"]].max(axis=1)
    for bar, r, y in zip(bars, data.to_dict("records"), top_of):
        text = f"k={fmt(r['draft_k'])} T={fmt(r['temperature'])}\nbs={fmt(r['batch_size'])}"
        if several_methods:
            text = f"{r['method']}\n{text}"
        if r["tie"]:
            text += "\n(tie)"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, y), xytext=(0, 2),
                    textcoords="offset points", ha="center", va="bottom", fontsize=7)
    if data["tie"].any():
        notes.append("(tie): the runner-up lies inside the winner's 95% interval (or the winner has none): "
                     "the data do not tell them apart.")
    ar_line(ax)
    ax.set_xticks(x, data["category"], rotation=30 if len(data) > 6 else 0, ha="right" if len(data) > 6 else "center")
    ax.grid(False, axis="x")
    top = data.loc[data["value"].idxmax()]
    return finish(fig, ax, data, notes, path, xlabel="Spec-Bench category", ylabel="speedup over AR (×)",
                  title=f"Best speedup per category (highest: {top['category']}, {top['value']:.2f}×)",
                  ylim=(0, top_of.max() * 1.3))


def fig_provenance(runs: pd.DataFrame, path) -> pd.DataFrame:
    """(i) Share of emitted tokens proposed by each level (target = its own tokens),
    one stacked bar per run configuration."""
    notes: list[str] = []
    d = at_reference_batch(configs(runs), notes)
    prefix = "metrics.provenance/"
    rows = []
    for r in d.sort_values(["method", "draft_k", "temperature"]).to_dict("records"):
        order = levels_of(r["method"]) + [TARGET]
        extra = sorted(c[len(prefix):] for c in r if c.startswith(prefix) and c[len(prefix):] not in order)
        config = (f"{r['method']}  k={fmt(r['draft_k'])} T={fmt(r['temperature'])}"
                  if pd.notna(r["top_level"]) else f"{r['method']} (AR)  T={fmt(r['temperature'])}")
        for level in order + extra:
            value = metric(r, f"provenance/{level}")
            if not np.isnan(value):
                rows.append({"run_id": r["run_id"], "config": config, "method": r["method"],
                             "draft_k": r["draft_k"], "temperature": r["temperature"],
                             "batch_size": r["batch_size"], "level": level,
                             "metric": f"provenance/{level}", "value": value})
    data = pd.DataFrame(rows)
    if data.empty:
        raise FigureSkipped("no run logged provenance/<level> metrics")

    fig, (ax,) = new_figure()
    # Colours follow the hierarchy, bottom level first, target last, the same in every bar.
    level_order = list(dict.fromkeys(
        [lv for m in data["method"].unique() for lv in levels_of(m)] + list(data["level"].unique())))
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
        ax.barh(np.arange(len(runs_order)), widths, left=left, height=0.7, label=level,
                color="0.6" if level == TARGET else f"C{i}")
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
        fig_acceptance_vs_k, "Acceptance rate per level vs draft length",
        "Acceptance rate (accepted / drafted) of each draft level vs the draft length k of the "
        "level right below the target."),
    "tokens_per_call_vs_k": (
        fig_tokens_per_call_vs_k, "Tokens per target call vs draft length, with theory",
        "Mean acceptance length (1 + accepted / drafts: tokens per target call, bonus included) vs k; "
        "dashed: the i.i.d. theory 1 + α̂ + … + α̂^k at each run's α̂ = accepted / (accepted + rejections)."),
    "speedup_vs_predicted": (
        fig_speedup_vs_predicted, "Measured vs predicted speedup",
        "Measured speedup (bars: 95% interval) vs the out-of-sample prediction each job made before timing "
        "(`predicted_speedup`: a short decode of prompts the job does not evaluate, with the method and "
        "plain decoding; tokens per call from those rounds' yields, their round and step times, plus "
        "prefill); dashed: y = x."),
    "wasted_vs_k": (
        fig_wasted_vs_k, "Wasted compute vs draft length",
        "Share of the level-below-target's drafts discarded (wasted_draft_fraction), and share of "
        "target-scored positions discarded (wasted_target_fraction), vs k."),
    "speedup_vs_temperature": (
        fig_speedup_vs_temperature, "Speedup vs temperature",
        "Speedup over AR (tokens/s ÷ AR tokens/s in the same job, interleaved per batch) vs sampling "
        "temperature; bars: 95% intervals."),
    "speedup_vs_batch_size": (
        fig_speedup_vs_batch_size, "Speedup vs batch size",
        "Left: speedup over AR vs batch size. Right: speculative (solid) vs AR (dashed) tokens/s. Bars: 95% "
        "intervals."),
    "position_acceptance": (
        fig_position_acceptance, "Per-position acceptance",
        "Of the rounds that tested a draft token at depth i (the walk got there and the node had "
        "children), the share that accepted one (position_acceptance/i)."),
    "category_speedup": (
        fig_category_speedup, "Speedup per Spec-Bench category",
        "Best speedup per Spec-Bench category over all runs with its 95% interval, each bar labelled with "
        "its config; red: the runner-up (a maximum over noisy runs is biased upwards)."),
    "provenance": (
        fig_provenance, "Provenance of emitted tokens",
        "Share of emitted tokens proposed by each level; target = the target's own tokens."),
}
