"""The report's figures read back: each built from a hand-made frame of runs (the columns
``load.load_runs`` gives), then the drawn figure itself is read (axis labels, the lines
and their data), not only the PNG's existence.

The frame mimics the main sweep on the pair: the staged default ngram>small>copy>target
(copy drafts for the target, so its k is ``draft_k``; the others' k are
``levels.<level>.k``) at T = 0 and 0.7, its small level's k and its copy span varied at
T = 0, its batch size 1..8 at T = 0, and the two two-level ablations at one k each.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from analysis import figures, plotting
from analysis.axes import crossover
from analysis.figures import (
    FigureSkipped,
    fig_acceptance_vs_k,
    fig_category_speedup,
    fig_speedup_vs_batch_size,
    fig_speedup_vs_temperature,
    fig_tokens_per_call_vs_k,
    fig_wasted_time_vs_k,
    fig_wasted_vs_k,
)
from analysis.theory import expected_tokens_per_call

STAGED = "ngram>small>copy>target"
STANDARD = "small>target"
LOOKUP = "copy>target"
SPEEDUP_BY_BATCH = {1: 1.6, 2: 1.3, 4: 0.9, 8: 0.6}
"""The staged default's speedup per batch size: it crosses 1 between 2 and 4, at
2 + (4 - 2) * (1.3 - 1) / (1.3 - 0.9) = 3.5."""


def _run(method: str, t: float = 0.0, bs: int = 1, small: int = 12, copy: int = 24, ngram: int = 10, **extra) -> dict:
    """One child run as ``load_runs`` gives it, with numbers that tell its settings apart."""
    levels = method.split(">")[:-1]
    ks = {"ngram": ngram, "small": small, "copy": copy if method == STAGED else 10}
    row = {
        "run_id": f"{method}-T{t}-bs{bs}-s{small}-c{copy}-{len(extra)}",
        "status": "FINISHED",
        "params.method": method,
        "params.draft_k": ks[levels[-1]],
        "params.temperature": t,
        "params.batch_size": bs,
        "params.tree": "chain",
        "params.max_new_tokens": 64,
        # an outcome logged as a param: the calibration's prompts, as many as the batch holds
        "params.prediction.calibration": f"heldout: questions {list(range(max(2, bs)))}",
    }
    for level in levels[:-1]:
        row[f"params.levels.{level}.k"] = ks[level]
    speedup = SPEEDUP_BY_BATCH[bs] - 0.2 * t + 0.001 * ks[levels[-1]] + 0.002 * small * ("small" in levels)
    m = {
        "speedup": speedup,
        "speedup_ci_low": speedup - 0.1,
        "speedup_ci_high": speedup + 0.1,
        "ar_tokens_per_s": 20.0 * bs,
        "tokens_per_s": 20.0 * bs * speedup,
        "alpha_hat": 0.9 - 0.01 * small - 0.1 * t,
        "mean_acceptance_length": 1.5 + 0.1 * small + 0.01 * copy,
        "wasted_target_fraction": 0.3 + 0.01 * small + 0.001 * copy,
        "emitted": 64.0 * bs,
        "target_calls": 20.0,
        "target_call_s": 0.1,
        "batch_rounds": 20.0,
    }
    for i, level in enumerate(levels):
        m[f"acceptance_rate/{level}"] = 0.5 + 0.1 * i - 0.005 * ks[level] - 0.05 * t
        m[f"wasted_draft_fraction/{level}"] = 0.1 + 0.1 * i + 0.01 * ks[level]
        m[f"round_draft_forward_s/{level}"] = 0.001 * (i + 1) * ks[level]
    if small == 8:  # logged by newer runs only: the theory at each round's own depth
        m["iid_tokens_per_call"] = 2.75
    row |= {f"metrics.{k}": v for k, v in m.items()}
    return row | extra


def sweep_frame() -> pd.DataFrame:
    runs = [_run(STAGED, t) for t in (0.0, 0.7)]
    runs += [_run(STAGED, small=k) for k in (4, 8)]  # the small level's k axis (12 above)
    runs += [_run(STAGED, copy=16)]  # the copy span's axis (24 above)
    runs += [_run(STAGED, bs=b) for b in (2, 4, 8)]  # the batch axis (1 above)
    # differs in max_new_tokens too: on no line with the others
    runs += [_run(STAGED, small=16, **{"params.max_new_tokens": 32})]
    runs += [_run(m, t) for m in (STANDARD, LOOKUP) for t in (0.0, 0.7)]
    return pd.DataFrame(runs)


@pytest.fixture
def drawn(monkeypatch):
    """The matplotlib Figure of every figure drawn in the test, in order."""
    figs = []
    real = plotting.save

    def keep(fig, path, data, notes):
        figs.append(fig)
        return real(fig, path, data, notes)

    monkeypatch.setattr(figures, "save", keep)  # figures saved by figures.py itself
    monkeypatch.setattr(plotting, "save", keep)  # and through plotting.finish
    return figs


def series(ax) -> dict:
    """The labelled lines of a panel (mean lines, theory, AR, crossovers), by label; error
    bar caps and per-run dots carry matplotlib's "_" labels and are left out."""
    out = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert len(out) == sum(not line.get_label().startswith("_") for line in ax.get_lines()), "duplicate labels"
    return out


def panels_by_level(fig) -> dict:
    """k-figure panels by the level their x label names."""
    out = {}
    for ax in fig.axes:
        label = ax.get_xlabel()
        assert label.startswith("k of level '") and label.endswith("' (tokens)"), label
        out[label[len("k of level '") : -len("' (tokens)")]] = ax
    return out


def logged(frame: pd.DataFrame, name: str, **where) -> float:
    hit = frame
    for col, value in where.items():
        hit = hit[hit[col] == value]
    assert len(hit) == 1, where
    return float(hit[f"metrics.{name}"].iloc[0])


def k_runs(frame: pd.DataFrame, level: str) -> pd.DataFrame:
    """The staged default's T = 0, batch-1, 64-token runs along ``level``'s k, by that k."""
    d = frame[
        (frame["params.method"] == STAGED)
        & (frame["params.temperature"] == 0)
        & (frame["params.batch_size"] == 1)
        & (frame["params.max_new_tokens"] == 64)
    ]
    if level == "copy":
        d = d[d["params.levels.small.k"] == 12].set_index("params.draft_k")
    else:
        d = d[d["params.draft_k"] == 24].set_index("params.levels.small.k")
    return d.sort_index()


# ------------------------------------------------------------------------------ k axes


def test_acceptance_vs_k_is_drawn_per_method_and_varied_level(drawn, tmp_path):
    frame = sweep_frame()
    data = fig_acceptance_vs_k(frame, tmp_path / "a.png")
    (fig,) = drawn
    by_level = panels_by_level(fig)
    assert set(by_level) == {"small", "copy"}  # the two ablations ran at one k: no axis
    # the method, and the other levels' k its line holds
    assert by_level["small"].get_title() == f"{STAGED}\nk(ngram)=10, k(copy)=24"
    assert by_level["copy"].get_title() == f"{STAGED}\nk(ngram)=10, k(small)=12"
    assert any(f"{LOOKUP}, {STANDARD}" in n for n in data.attrs["notes"])
    for level, ax in by_level.items():
        lines = series(ax)
        # one line per draft level of the method: the runs at T = 0 differing only in this k
        assert set(lines) == {"ngram", "small", "copy"}
        runs = k_runs(frame, level)
        np.testing.assert_array_equal(lines["small"].get_xdata(), runs.index.to_numpy())
        np.testing.assert_array_equal(lines["small"].get_ydata(), runs["metrics.acceptance_rate/small"].to_numpy())
    # the small axis holds k = 4, 8, 12, not the 16 of the run that also differs in max_new_tokens
    assert list(by_level["small"].get_xticks()) == [4, 8, 12]
    assert set(data.loc[data["axis_level"] == "copy", "k"]) == {16, 24}
    assert (data["temperature"] == 0).all()


def test_tokens_per_call_vs_k_with_its_theory(drawn, tmp_path):
    frame = sweep_frame()
    data = fig_tokens_per_call_vs_k(frame, tmp_path / "b.png")
    ax = panels_by_level(drawn[0])["small"]
    lines = series(ax)
    assert set(lines) == {"measured", "theory: measured"}
    runs = k_runs(frame, "small")
    np.testing.assert_array_equal(lines["measured"].get_ydata(), runs["metrics.mean_acceptance_length"].to_numpy())
    # theory: the logged iid_tokens_per_call at k = 8, else 1 + a + ... + a^24 (copy drafts 24)
    at = {k: expected_tokens_per_call(runs.loc[k, "metrics.alpha_hat"], 24) for k in (4, 12)}
    np.testing.assert_allclose(lines["theory: measured"].get_ydata(), [at[4], 2.75, at[12]], rtol=1e-12)
    assert set(data["axis_level"]) == {"small", "copy"}


def test_wasted_vs_k_has_a_line_per_level_and_the_target(drawn, tmp_path):
    frame = sweep_frame()
    fig_wasted_vs_k(frame, tmp_path / "d.png")
    ax = panels_by_level(drawn[0])["copy"]
    lines = series(ax)
    assert set(lines) == {"ngram", "small", "copy", "target"}
    runs = k_runs(frame, "copy")
    np.testing.assert_array_equal(lines["copy"].get_xdata(), [16, 24])
    np.testing.assert_array_equal(lines["target"].get_ydata(), runs["metrics.wasted_target_fraction"].to_numpy())
    np.testing.assert_array_equal(lines["copy"].get_ydata(), runs["metrics.wasted_draft_fraction/copy"].to_numpy())


def test_wasted_time_is_seconds_times_share_per_token(drawn, tmp_path):
    frame = sweep_frame()
    data = fig_wasted_time_vs_k(frame, tmp_path / "e.png")
    lines = series(panels_by_level(drawn[0])["small"])
    assert set(lines) == {"ngram", "small", "copy", "target"}
    # small at k = 4 (its index 1, so 0.002 s per k per round): 0.008 s x 20 rounds x 0.25 / 64 tokens
    small = dict(zip(lines["small"].get_xdata(), lines["small"].get_ydata()))
    assert small[4] == pytest.approx(1000 * 0.008 * 20 * (0.2 + 0.04) / 64)
    # the target at small k = 12: 0.1 s x 20 forwards x (0.3 + 0.12 + 0.024) / 64 tokens
    target = dict(zip(lines["target"].get_xdata(), lines["target"].get_ydata()))
    assert target[12] == pytest.approx(1000 * 0.1 * 20 * 0.444 / 64)
    row = data[(data["wasted"] == "small") & (data["axis_level"] == "small") & (data["k"] == 4)].iloc[0]
    assert (row["seconds_metric"], row["units_metric"], row["share_metric"]) == (
        "round_draft_forward_s/small",
        "batch_rounds",
        "wasted_draft_fraction/small",
    )
    assert any("Derived, not logged" in n for n in data.attrs["notes"])


def test_wasted_time_not_drawn_without_the_seconds(tmp_path):
    frame = sweep_frame()
    frame = frame.drop(
        columns=[c for c in frame if c.startswith("metrics.round_draft_forward_s/") or c == "metrics.target_call_s"]
    )
    with pytest.raises(FigureSkipped, match="round_draft_forward_s/<level>"):
        fig_wasted_time_vs_k(frame, tmp_path / "e.png")


# ----------------------------------------------------------------- temperature, batch size


def test_speedup_vs_temperature_one_line_per_method(drawn, tmp_path):
    frame = sweep_frame()
    data = fig_speedup_vs_temperature(frame, tmp_path / "f.png")
    (ax,) = drawn[0].axes
    assert ax.get_xlabel() == "sampling temperature T (0 = greedy)"
    lines = series(ax)
    assert set(lines) == {STAGED, STANDARD, LOOKUP, "AR (1×)"}
    np.testing.assert_array_equal(lines[STAGED].get_xdata(), [0.0, 0.7])
    want = [logged(frame, "speedup", **{"params.method": STANDARD, "params.temperature": t}) for t in (0.0, 0.7)]
    np.testing.assert_array_equal(lines[STANDARD].get_ydata(), want)
    # the staged runs along k and batch size ran at T = 0 only: not on a temperature line
    assert len(data) == 6 and (data["batch_size"] == 1).all()


def test_speedup_vs_batch_size_marks_the_crossover(drawn, tmp_path):
    frame = sweep_frame()
    data = fig_speedup_vs_batch_size(frame, tmp_path / "g.png")
    left, right = drawn[0].axes
    assert left.get_xlabel() == right.get_xlabel() == "batch size (sequences)"
    lines = series(left)
    line = STAGED  # the only line of runs differing in batch size alone: its method names it
    # by hand, linear between the sizes around the crossing (2 and 4): speedups 1.3 and 0.9,
    # each plus 0.024 + 0.024 from copy's and small's k in the fake numbers
    s2, s4 = 1.3 + 0.048, 0.9 + 0.048
    x = 2 + (4 - 2) * (s2 - 1) / (s2 - s4)
    assert set(lines) == {line, "AR (1×)", f"crossover {line}: B≈{x:.3g}"}
    np.testing.assert_array_equal(lines[line].get_xdata(), [1, 2, 4, 8])
    staged = frame[
        (frame["params.method"] == STAGED)
        & (frame["params.temperature"] == 0)
        & (frame["params.levels.small.k"] == 12)
        & (frame["params.draft_k"] == 24)
        & (frame["params.max_new_tokens"] == 64)
    ].sort_values("params.batch_size")
    np.testing.assert_array_equal(lines[line].get_ydata(), staged["metrics.speedup"].to_numpy())
    assert data["crossover_batch_size"].unique() == pytest.approx([x])
    assert lines[f"crossover {line}: B≈{x:.3g}"].get_xdata() == pytest.approx([x, x])
    assert (
        f"{line}: speedup crosses 1 at batch size ≈ 3.74 (linear between the sizes around it); speculation "
        "stops paying there." in data.attrs["notes"]
    )
    assert f"{line}: T=0, k(ngram)=10, k(small)=12, k(copy)=24." in data.attrs["notes"]
    tps = series(right)
    assert set(tps) == {f"spec: {line}", f"AR: {line}"}
    np.testing.assert_array_equal(tps[f"AR: {line}"].get_ydata(), staged["metrics.ar_tokens_per_s"].to_numpy())


def test_no_crossover_is_noted(drawn, tmp_path):
    frame = sweep_frame()
    frame["metrics.speedup"] += 1.0  # pays at every batch size
    data = fig_speedup_vs_batch_size(frame, tmp_path / "g.png")
    assert not any(label.startswith("crossover") for label in series(drawn[0].axes[0]))
    assert data["crossover_batch_size"].isna().all()
    assert f"{STAGED}: no crossover in 1..8 (speculation pays at every size measured)." in data.attrs["notes"]


def test_crossover_by_hand():
    assert crossover([1, 2, 4, 8], [1.6, 1.3, 0.9, 0.6]) == pytest.approx(3.5)
    assert crossover([1, 2], [0.8, 1.2]) == pytest.approx(1.5)  # starts paying
    assert crossover([1, 4], [1.0, 0.5]) == 1.0
    assert crossover([1, 2, 4], [1.5, 1.2, 1.1]) is None
    assert crossover([1, 2], [0.5, 0.7]) is None


# -------------------------------------------------------------------- one value on an axis


def test_one_value_axis_is_not_drawn(tmp_path):
    frame = sweep_frame()
    headline = frame[
        (frame["params.batch_size"] == 1)
        & (frame["params.levels.small.k"].fillna(12) == 12)
        & (frame["params.draft_k"] != 16)
    ]  # the main sweep before its axes: one k, one batch size
    assert len(headline) == 6
    with pytest.raises(FigureSkipped) as why:
        fig_acceptance_vs_k(headline, tmp_path / "a.png")
    assert str(why.value) == (
        f"each method ran at one k per draft level ({LOOKUP}: copy 10; {STAGED}: ngram 10, "
        f"small 12, copy 24; {STANDARD}: small 12): no k axis to draw"
    )
    with pytest.raises(FigureSkipped, match=r"^only one batch size \(1\) in these runs: no axis to draw$"):
        fig_speedup_vs_batch_size(headline, tmp_path / "g.png")
    greedy = frame[frame["params.temperature"] == 0]
    with pytest.raises(FigureSkipped, match=r"^only one temperature \(0\) in these runs: no axis to draw$"):
        fig_speedup_vs_temperature(greedy, tmp_path / "f.png")
    one_category = frame.assign(**{"metrics.speedup/coding": frame["metrics.speedup"]})
    with pytest.raises(FigureSkipped, match=r"^only one category \(coding\) in these runs: no axis to draw$"):
        fig_category_speedup(one_category, tmp_path / "i.png")
    assert not list(tmp_path.glob("*.png"))


def test_runs_on_no_common_line_are_not_drawn(tmp_path):
    # two batch sizes, but the bs = 2 run also differs in max_new_tokens: no line
    frame = pd.DataFrame([_run(STAGED), _run(STAGED, bs=2, **{"params.max_new_tokens": 32})])
    with pytest.raises(FigureSkipped, match="^no two runs differ only in batch size"):
        fig_speedup_vs_batch_size(frame, tmp_path / "g.png")


def test_report_prints_the_reason_in_place_of_the_figure():
    from analysis.report import _markdown

    frame = sweep_frame()
    parent = SimpleNamespace(info=SimpleNamespace(run_id="p" * 32, run_name="sweep"))
    reason = "only one batch size (1) in these runs: no axis to draw"
    md = _markdown("e", "sqlite:///x.db", parent, frame, {}, {name: reason for name in figures.FIGURES})
    assert f"**Not drawn** (`speedup_vs_batch_size.png`): {reason}." in md.splitlines()
    assert "](speedup_vs_batch_size.png)" not in md
