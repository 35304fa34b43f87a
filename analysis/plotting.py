"""The drawing every report figure shares: a figure of fixed size (7 x 4.5 in at 100 dpi =
700 x 450 px), lines through group means, short legends, and the common ending (axis
labels, title, legend, PNG, notes).

Figures are built on ``matplotlib.figure.Figure`` directly, not pyplot: no backend or
global state is touched, so this works headless and leaks nothing between calls.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import cycle
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .runs import fmt

FIGSIZE = (7.0, 4.5)
DPI = 100
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]

_PREFIX = {"temperature": "T=", "draft_k": "k=", "batch_size": "bs=", "tree": "tree="}
_STYLES = ["-", "--", ":", "-."]


def new_figure(ncols: int = 1, nrows: int = 1) -> tuple[Figure, list]:
    """A figure of fixed size with ``nrows`` x ``ncols`` panels, row by row."""
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, list(axes)


def varying(d: pd.DataFrame, cols: list[str], keep: tuple[str, ...] = ()) -> list[str]:
    """Columns of ``cols`` that take more than one value (or are in ``keep``); a series
    key made of these labels lines without repeating what every line shares."""
    keep = ("method", *keep)  # a line without its method is unreadable out of context
    out = [c for c in cols if c in keep or d[c].nunique(dropna=False) > 1]
    return out or cols[:1]


def label(cols: list[str], key) -> str:
    key = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{_PREFIX.get(c, '')}{fmt(v)}" for c, v in zip(cols, key) if fmt(v) != "")


def error_bars(
    ax, d: pd.DataFrame, x: str, y: str, err: tuple[str, str], colour, alpha: float = 0.7, offset: float = 0.0
) -> None:
    """Each row's 95% interval ``err`` = (low column, high column) as a vertical bar at its
    own (x, y); rows without an interval get none."""
    d = d.dropna(subset=list(err))
    if d.empty:
        return
    below = (d[y] - d[err[0]]).clip(lower=0)
    above = (d[err[1]] - d[y]).clip(lower=0)
    ax.errorbar(d[x] + offset, d[y], yerr=[below, above], fmt="none", ecolor=colour, alpha=alpha, capsize=3, lw=1)


def lines(
    ax,
    d: pd.DataFrame,
    x: str,
    y: str,
    by: list[str],
    style_by: str | None = None,
    colours: dict | None = None,
    labelled: bool = True,
    err: tuple[str, str] | None = None,
    name: str = "",
    **kw,
) -> tuple[dict, list]:
    """One line per group: colour per ``by`` key, line style per ``style_by`` value. The
    line goes through the mean of ``y`` at each ``x``; runs sharing a point are dots.
    ``err`` (low, high columns): each run's 95% interval as an error bar at its value.
    Each mean line carries its group's label, after ``name`` (``Line2D.get_label``), so a
    test can find it.

    Returns the colour of each ``by`` key and legend handles: one per colour, then one
    per line style, so labels stay short instead of naming every combination."""
    colours = {} if colours is None else colours
    styles = dict(zip(sorted(d[style_by].unique()), cycle(_STYLES))) if style_by else {}
    groups = by + ([style_by] if style_by else [])
    for key, g in d.groupby(groups, sort=True, dropna=False):
        colour = colours.setdefault(key[: len(by)], f"C{len(colours) % 10}")
        kwargs = {"marker": "o", "markersize": 4, "ls": styles[key[-1]] if style_by else "-"} | kw
        mean = g.groupby(x)[y].mean().sort_index()
        ax.plot(mean.index, mean.values, color=colour, label=name + label(groups, key), **kwargs)
        if g.duplicated(x).any():
            ax.plot(g[x], g[y], ls="none", marker=".", color=colour, alpha=0.35)
        if err is not None and set(err) <= set(g.columns):
            error_bars(ax, g, x, y, err, colour)
    handles = []
    if labelled:
        handles = [Line2D([], [], color=c, marker="o", markersize=4, label=label(by, k)) for k, c in colours.items()]
        handles += [Line2D([], [], color="grey", ls=ls, label=label([style_by], v)) for v, ls in styles.items()]
    return colours, handles


def legend(fig: Figure, ax, handles=None, title: str | None = None) -> None:
    handles = handles if handles is not None else ax.get_legend_handles_labels()[0]
    if not handles:
        return
    if len(handles) > 5:  # too many to find a free corner: beside the axes, off the data
        # "center", not "upper": an upper legend collides with the figure title.
        fig.legend(handles=handles, loc="outside right center", fontsize=7, title=title, title_fontsize=7)
    else:
        ax.legend(handles=handles, loc="best", fontsize=7.5, title=title, title_fontsize=7.5)


def suptitle(fig: Figure, text: str) -> None:
    # On the figure, not the axes: a legend beside the axes must not squeeze the title.
    fig.suptitle(text, fontsize=12)


def int_values(values) -> list[int]:
    """Tick positions for an integer x (k, position)."""
    return sorted(int(v) for v in pd.unique(values))


def ar_line(ax):
    """The AR reference, speedup 1."""
    return ax.axhline(1.0, color="black", lw=1, ls=":", label="AR (1×)")


def save(fig: Figure, path, data: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """Write the PNG; return the plotted data, carrying the notes the report prints."""
    # No bbox_inches="tight": it would change the pixel size from figure to figure.
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")
    data.attrs["notes"] = notes
    return data


def finish(
    fig: Figure,
    ax,
    data: pd.DataFrame,
    notes: list[str],
    path,
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    ylim: tuple[float, float] | None = None,
    handles=None,
) -> pd.DataFrame:
    """The ending of a one-panel figure: axis labels, title, legend (``handles``, else
    the labelled artists), then ``save``."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    suptitle(fig, title)
    legend(fig, ax, handles)
    return save(fig, path, data, notes)


def line_figure(
    data: pd.DataFrame,
    x: str,
    y: str,
    by: list[str],
    path,
    notes: list[str],
    *,
    xticks,
    xlabel: str,
    ylabel: str,
    title: str,
    style_by: str | None = None,
    ylim: tuple[float, float] | None = None,
    more: Callable[[object, dict], list] | None = None,
    err: tuple[str, str] | None = None,
) -> pd.DataFrame:
    """The common figure: ``y`` against ``x``, one line per ``by`` group (a line style per
    ``style_by`` value), then ``finish``. ``more(ax, colours)`` draws extra layers in the
    lines' colours and returns their legend handles; ``err`` adds each run's 95% interval."""
    fig, (ax,) = new_figure()
    colours, handles = lines(ax, data, x, y, by, style_by, err=err)
    if more is not None:
        handles += more(ax, colours)
    ax.set_xticks(xticks)
    return finish(fig, ax, data, notes, path, xlabel=xlabel, ylabel=ylabel, title=title, ylim=ylim, handles=handles)


def panels(n: int) -> tuple[Figure, list]:
    """A figure of ``n`` panels, up to three a row; the spare cells of the grid removed."""
    ncols = min(3, n)
    nrows = -(-n // ncols)
    fig, axes = new_figure(ncols, nrows)
    for ax in axes[n:]:
        fig.delaxes(ax)
    return fig, axes[:n]


def figure_legend(fig: Figure, handles: list) -> None:
    """One legend for every panel, each label once, below the panels."""
    unique = list({h.get_label(): h for h in handles}.values())
    if unique:
        fig.legend(handles=unique, loc="outside lower center", ncol=min(4, len(unique)), fontsize=7)
