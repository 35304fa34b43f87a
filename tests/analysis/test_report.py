"""The report rebuilt from a fake sweep logged straight into a fresh SQLite MLflow store.

The sweep mimics what the tracker writes (parent + children, params as strings, metrics
per level / position / category), with synthetic but varied numbers, so every figure's
plotted data can be checked value for value against what was logged.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param

from analysis import ExperimentNotFound, latest_parent, load_runs
from analysis.figures import FIGURES, FigureSkipped, fig_category_speedup, fig_speedup_vs_temperature
from analysis.report import build_report, main, parse_args
from analysis.runs import best_per_category
from analysis.theory import expected_tokens_per_call, predicted_speedup

EXPERIMENT = "fake-sweep"
THREE = "ngram>small>target"
TWO = "small>target"
CATEGORIES = {"qa": 1.0, "math": 1.1, "summarization": 0.9}
# (method, k, T, batch size) made the clear winner of each category by a large bonus.
WINNERS = {
    "qa": (THREE, 2, 0.0, 1),
    "math": (TWO, 4, 0.0, 1),
    "summarization": (THREE, 8, 0.7, 8),
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _config(method: str, k: int, t: float, bs: int) -> tuple[dict, dict]:
    """Params and metrics of one fake job."""
    levels = method.split(">")[:-1]
    params = {
        "method": method,
        "draft_k": k,
        "temperature": t,
        "batch_size": bs,
        "tree": "chain",
        "n_levels": len(levels),
        "sampling.temperature": t,
        "max_new_tokens": 64,
        "target.source": "hf:tiny-target",
    }
    for level in levels:
        params[f"levels.{level}.k"] = k if level == levels[-1] else 3
    ar = 30.0 * bs
    if not levels:  # plain AR job
        metrics = {
            "speedup": 1.0,
            "tokens_per_s": ar,
            "ar_tokens_per_s": ar,
            "mean_accepted_tokens_per_call": 1.0,
            "provenance/target": 1.0,
            "wall_time_s": 2.0,
        }
        metrics |= {f"speedup/{c}": 1.0 for c in CATEGORIES}
        return params, metrics

    alpha = 0.80 - 0.10 * t - 0.01 * k - (0.05 if method == TWO else 0.0)
    tokens = float(expected_tokens_per_call(alpha, k)) * 0.97
    speedup = float(predicted_speedup(alpha, k, 0.12)) * (0.9 if bs == 1 else 0.6) + 0.001 * k
    metrics = {
        "acceptance_rate": alpha * (1 - alpha**k) / (k * (1 - alpha)),  # accepted / drafted, not alpha
        "acceptance_rate/small": alpha,
        "alpha_hat": alpha,
        "mean_acceptance_length": tokens,
        "mean_accepted_tokens_per_call": tokens,
        "predicted_speedup": speedup * (1.04 + 0.01 * k),
        "speedup_ci_low": speedup * 0.9,
        "speedup_ci_high": speedup * 1.1,
        "tokens_per_s_ci_low": ar * speedup * 0.9,
        "tokens_per_s_ci_high": ar * speedup * 1.1,
        "ar_tokens_per_s_ci_low": ar * 0.95,
        "ar_tokens_per_s_ci_high": ar * 1.05,
        "timing_spread": 0.05,
        "system_efficiency": tokens / (k + 1),
        "wasted_draft_fraction/small": (k - (tokens - 1)) / k,
        "wasted_target_fraction": 1 - tokens / (k + 1),
        "padding_fraction": 0.02 * bs,
        "cost_ratio/small": 0.12,
        "tokens_per_s": ar * speedup,
        "ar_tokens_per_s": ar,
        "speedup": speedup,
        "wall_time_s": 10.0 / speedup,
        "tree_nodes_per_call": float(k),
        "provenance/small": (tokens - 1) / tokens * (0.4 if "ngram" in levels else 1.0),
        "provenance/target": 1 / tokens,
        # what a time of discarded work is derived from (figures.wasted_time)
        "emitted": 64.0 * bs,
        "batch_rounds": 64.0 / tokens,
        "target_calls": 64.0 / tokens,
        "target_call_s": 0.05 + 0.002 * bs,
        "round_draft_forward_s/small": 0.004 * k,
    }
    if "ngram" in levels:
        metrics |= {
            "acceptance_rate/ngram": 0.55 - 0.05 * t - 0.02 * k,
            "wasted_draft_fraction/ngram": 0.3 + 0.01 * k,
            "cost_ratio/ngram": 0.001,
            "provenance/ngram": (tokens - 1) / tokens * 0.6,
            "round_draft_forward_s/ngram": 0.0001 * k,
        }
    for i in range(1, k + 1):
        metrics[f"position_acceptance/{i}"] = alpha * (1 - 0.03 * (i - 1))
    for cat, factor in CATEGORIES.items():
        bonus = 3.0 if WINNERS[cat] == (method, k, t, bs) else 0.0
        metrics[f"speedup/{cat}"] = speedup * factor + bonus
        metrics[f"speedup_ci_low/{cat}"] = (speedup * factor + bonus) * 0.85
        metrics[f"speedup_ci_high/{cat}"] = (speedup * factor + bonus) * 1.15
        metrics[f"tokens_per_s/{cat}"] = ar * speedup * factor
        metrics[f"mean_accepted_tokens_per_call/{cat}"] = tokens * factor
    return params, metrics


def _log_run(client, exp_id, start_ms, tags, params=None, metrics=None, name=None) -> str:
    run = client.create_run(exp_id, start_time=start_ms, tags=tags, run_name=name)
    rid = run.info.run_id
    client.log_batch(
        rid,
        metrics=[Metric(k, float(v), start_ms, 0) for k, v in (metrics or {}).items()],
        params=[Param(k, str(v)) for k, v in (params or {}).items()],
    )
    client.set_terminated(rid, "FINISHED")
    return rid


def _child(client, exp_id, parent_id, start_ms, method, k, t, bs):
    params, metrics = _config(method, k, t, bs)
    tags = {
        "stagedspec.role": "child",
        "mlflow.parentRunId": parent_id,
        "stagedspec.method": method,
        "stagedspec.config_hash": f"{method}-{k}-{t}-{bs}",
    }
    rid = _log_run(client, exp_id, start_ms, tags, params, metrics, name=f"{method} k={k} T={t} bs={bs}")
    return rid, (method, k, t, bs), metrics


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    uri = "sqlite:///" + str(root / "mlflow.db")
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment(EXPERIMENT, artifact_location=(root / "artifacts").as_uri())
    now = int(time.time() * 1000)

    # An older sweep in the same experiment whose one child would win everything: the
    # report must not see it.
    old = _log_run(client, exp_id, now - 3_600_000, {"stagedspec.role": "parent"}, name="old")
    old_child, _, _ = _child(client, exp_id, old, now - 3_500_000, THREE, 2, 0.0, 1)
    client.log_batch(old_child, metrics=[Metric("speedup/qa", 99.0, now, 0), Metric("speedup", 99.0, now, 0)])

    parent = _log_run(client, exp_id, now, {"stagedspec.role": "parent"}, name="sweep")
    logged, keys = {}, {}
    jobs = [(THREE, k, t, bs) for k in (1, 2, 4, 8) for t in (0.0, 0.7) for bs in (1, 8)]
    jobs += [(TWO, 4, 0.0, 1), ("target", 0, 0.0, 1), ("target", 0, 0.0, 8)]
    for i, job in enumerate(jobs):
        rid, key, metrics = _child(client, exp_id, parent, now + 1 + i, *job)
        logged[rid], keys[key] = metrics, rid

    out = root / "report"
    plotted = build_report(uri, EXPERIMENT, out)
    return {
        "uri": uri,
        "client": client,
        "parent": parent,
        "old_child": old_child,
        "logged": logged,
        "keys": keys,
        "out": out,
        "plotted": plotted,
        "root": root,
    }


# --------------------------------------------------------------------------- loading


def test_load_runs_converts_params_and_filters_parent(sweep):
    runs = load_runs(sweep["uri"], EXPERIMENT, sweep["parent"])
    assert set(runs["run_id"]) == set(sweep["logged"])
    assert pd.api.types.is_integer_dtype(runs["params.draft_k"])
    assert pd.api.types.is_float_dtype(runs["params.temperature"])
    assert set(runs["params.temperature"]) == {0.0, 0.7}
    assert set(runs["params.tree"]) == {"chain"}
    assert (runs["tags.stagedspec.role"] == "child").all()
    assert "metrics.acceptance_rate/ngram" in runs.columns
    everything = load_runs(sweep["uri"], EXPERIMENT)  # whole experiment: old sweep too
    assert sweep["old_child"] in set(everything["run_id"])
    assert len(everything) == len(runs) + 1


def test_latest_parent_is_newest_sweep(sweep):
    assert latest_parent(sweep["uri"], EXPERIMENT) == sweep["parent"]


def test_missing_experiment_names_it_and_lists_existing(sweep):
    with pytest.raises(ExperimentNotFound, match="no-such-sweep") as err:
        load_runs(sweep["uri"], "no-such-sweep")
    assert repr(EXPERIMENT) in str(err.value)
    with pytest.raises(SystemExit, match="no-such-sweep"):
        main([f"tracking_uri={sweep['uri']}", "experiment=no-such-sweep", f"out={sweep['root'] / 'x'}"])


def test_missing_database_is_an_error_not_a_new_file(tmp_path):
    missing = tmp_path / "absent.db"
    with pytest.raises(FileNotFoundError, match="absent.db"):
        load_runs("sqlite:///" + str(missing), EXPERIMENT)
    assert not missing.exists()


def test_cli_arguments_and_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = parse_args(["experiment=e"])
    assert args == {"experiment": "e", "tracking_uri": f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}", "out": "report"}
    assert parse_args(["experiment=e", "parent=abc", "out=o"])["parent"] == "abc"
    with pytest.raises(SystemExit, match="usage"):
        parse_args(["experiment=e", "bogus=1"])


# --------------------------------------------------------------------------- figures


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_every_figure_is_a_png_of_fixed_size(sweep):
    assert set(sweep["plotted"]) == set(FIGURES)
    for name in FIGURES:
        assert _png_size(sweep["out"] / f"{name}.png") == (700, 450), name


# Wide figures: plotted column -> logged metric name (given the row).
WIDE = {
    "tokens_per_call_vs_k": {
        "alpha_hat": lambda r: "alpha_hat",
        "mean_acceptance_length": lambda r: "mean_acceptance_length",
    },
    "speedup_vs_predicted": {
        "predicted_speedup": lambda r: "predicted_speedup",
        "speedup": lambda r: "speedup",
        "speedup_ci_low": lambda r: "speedup_ci_low",
        "speedup_ci_high": lambda r: "speedup_ci_high",
    },
    "speedup_vs_temperature": {
        "speedup": lambda r: "speedup",
        "speedup_ci_low": lambda r: "speedup_ci_low",
        "speedup_ci_high": lambda r: "speedup_ci_high",
    },
    "speedup_vs_batch_size": {
        "speedup": lambda r: "speedup",
        "tokens_per_s": lambda r: "tokens_per_s",
        "ar_tokens_per_s": lambda r: "ar_tokens_per_s",
        "speedup_ci_low": lambda r: "speedup_ci_low",
        "tokens_per_s_ci_high": lambda r: "tokens_per_s_ci_high",
        "ar_tokens_per_s_ci_low": lambda r: "ar_tokens_per_s_ci_low",
    },
    "wasted_time_vs_k": {
        "seconds": lambda r: r["seconds_metric"],
        "units": lambda r: r["units_metric"],
        "share": lambda r: r["share_metric"],
        "emitted": lambda r: "emitted",
    },
    "category_speedup": {
        "value": lambda r: f"speedup/{r['category']}",
        "ci_low": lambda r: f"speedup_ci_low/{r['category']}",
        "ci_high": lambda r: f"speedup_ci_high/{r['category']}",
    },
}


def test_plotted_data_equal_logged_metrics(sweep):
    logged = sweep["logged"]
    for name, data in sweep["plotted"].items():
        assert not data.empty, name
        assert set(data["run_id"]) <= set(logged), f"{name} plots a run outside the sweep"
        for r in data.to_dict("records"):
            if "metric" in data.columns:  # long format: one logged metric per row
                assert r["value"] == logged[r["run_id"]][r["metric"]], (name, r)
            for col, metric_name in WIDE.get(name, {}).items():
                assert r[col] == logged[r["run_id"]][metric_name(r)], (name, col, r)


def test_figures_cover_the_expected_runs(sweep):
    plotted, keys = sweep["plotted"], sweep["keys"]
    spec_all = {rid for (m, k, t, bs), rid in keys.items() if k > 0}
    # k axes: every draft level of every batch-1 run of the three-level method, the only one
    # whose k varies (the two-level method ran at one k: it is on no k axis, and a note says so).
    on_k = {rid for (m, k, t, bs), rid in keys.items() if m == THREE and bs == 1}
    a = plotted["acceptance_vs_k"]
    assert set(a["run_id"]) == on_k
    assert len(a) == 8 * 2
    assert set(a["metric"]) == {"acceptance_rate/ngram", "acceptance_rate/small"}
    assert set(a["axis_level"]) == {"small"} and set(a["line"]) == {"T=0", "T=0.7"}
    assert any(TWO in n and "Not on a k axis" in n for n in a.attrs["notes"])
    assert set(plotted["tokens_per_call_vs_k"]["run_id"]) == on_k
    assert set(plotted["speedup_vs_predicted"]["run_id"]) == spec_all
    assert set(plotted["wasted_vs_k"]["metric"]) == {
        "wasted_draft_fraction/small",
        "wasted_draft_fraction/ngram",
        "wasted_target_fraction",
    }
    e = plotted["wasted_time_vs_k"]
    assert set(e["wasted"]) == {"ngram", "small", "target"}
    np.testing.assert_allclose(e["wasted_ms_per_token"], 1000 * e["seconds"] * e["units"] * e["share"] / e["emitted"])
    # (f): a line per k of the three-level method (each ran at both temperatures); the
    # two-level method's one run has no temperature axis.
    assert set(plotted["speedup_vs_temperature"]["run_id"]) == on_k
    g = plotted["position_acceptance"]
    assert len(g) == sum(k for (m, k, t, bs) in keys if k > 0 and bs == 1)
    # (f): one best k per (method, T), each at both batch sizes where it ran.
    f = plotted["speedup_vs_batch_size"]
    assert f.groupby(["method", "temperature"])["draft_k"].nunique().eq(1).all()
    assert set(f["batch_size"]) == {1, 8}
    # (i): batch-1 runs including AR (all target), shares sum to 1.
    i = plotted["provenance"]
    assert keys[("target", 0, 0.0, 1)] in set(i["run_id"])
    np.testing.assert_allclose(i.groupby("run_id")["value"].sum(), 1.0)


def test_theory_matches_hand_computed_case(sweep):
    # k = 2, alpha_hat = 0.80 - 0.02 = 0.78: tokens = 1 + 0.78 + 0.78^2 = 2.3884, at alpha_hat,
    # not at accepted / drafted (0.78 * (1 - 0.78^2) / (2 * 0.22) = 0.7098, which would give 2.214)
    rid = sweep["keys"][(THREE, 2, 0.0, 1)]
    b = sweep["plotted"]["tokens_per_call_vs_k"].set_index("run_id").loc[rid]
    assert b["alpha_hat"] == 0.80 - 0.10 * 0.0 - 0.01 * 2
    assert b["theoretical_tokens_per_call"] == pytest.approx(2.3884, rel=1e-12)
    c = sweep["plotted"]["speedup_vs_predicted"].set_index("run_id").loc[rid]
    assert c["error"] == pytest.approx(1.06 - 1, rel=1e-9)  # the fake prediction is 6% high at k = 2


def test_theory_edge_cases():
    assert expected_tokens_per_call(1.0, 4) == 5.0  # the alpha -> 1 limit, gamma + 1
    assert expected_tokens_per_call(0.0, 4) == 1.0
    assert predicted_speedup(1.0, 3, 0.5) == pytest.approx(4 / 2.5)
    # a verification of 3 positions costing 1.5 single-position forwards: 2.3884 / (2 * 0.12 + 1.5)
    assert predicted_speedup(0.78, 2, 0.12, 1.5) == pytest.approx(2.3884 / 1.74)
    np.testing.assert_allclose(expected_tokens_per_call(np.array([0.5, 1.0]), np.array([1, 2])), [1.5, 3.0])


def test_category_winners(sweep):
    h = sweep["plotted"]["category_speedup"].set_index("category")
    for cat, key in WINNERS.items():
        assert h.loc[cat, "run_id"] == sweep["keys"][key], cat


def test_single_value_x_and_empty_figure_are_skipped(sweep, tmp_path):
    runs = load_runs(sweep["uri"], EXPERIMENT, sweep["parent"])
    one_t = runs[(runs["params.temperature"] == 0.7) & (runs["params.batch_size"] == 1)]
    with pytest.raises(FigureSkipped, match=r"^only one temperature \(0.7\) in these runs: no axis to draw$"):
        fig_speedup_vs_temperature(one_t, tmp_path / "t.png")
    assert not (tmp_path / "t.png").exists()
    no_categories = runs.drop(columns=[c for c in runs.columns if c.startswith("metrics.speedup/")])
    with pytest.raises(FigureSkipped, match="speedup/<category>"):
        fig_category_speedup(no_categories, tmp_path / "h.png")
    assert not (tmp_path / "h.png").exists()


# ---------------------------------------------------------------------------- report


def test_report_md_mentions_every_figure_and_best_table(sweep):
    md = (sweep["out"] / "report.md").read_text()
    for name, (_, heading, _) in FIGURES.items():
        assert f"]({name}.png)" in md and heading in md, name
    best_section = md.split("## Best configuration per category")[1].split("## Figures")[0]
    best_rows = {line.split("|")[1].strip(): line for line in best_section.splitlines() if line.startswith("| ")}
    logged = sweep["logged"]
    for cat, key in WINNERS.items():
        rid = sweep["keys"][key]
        m = logged[rid]
        assert rid[:8] in best_rows[cat], cat
        # the winner's speedup with its interval, and whether the runner-up is inside it
        assert (
            f"{m[f'speedup/{cat}']:.2f} [{m[f'speedup_ci_low/{cat}']:.2f}, {m[f'speedup_ci_high/{cat}']:.2f}]"
        ) in best_rows[cat], cat
        assert "yes: runner-up" in best_rows[cat]  # the bonus of 3 puts it clear
    overall = max(logged, key=lambda rid: logged[rid]["speedup"])
    assert overall[:8] in best_rows["all"]
    assert sweep["old_child"][:8] not in md
    all_runs = md.split("## All runs")[1].split("## Cost model")[0]
    assert all_runs.count("| ngram>small>target |") == 16 and all_runs.count("| target |") == 2
    for rid, m in logged.items():  # every speedup in the runs table carries its interval
        if "speedup_ci_low" in m:
            assert f"{m['speedup']:.2f} [{m['speedup_ci_low']:.2f}, {m['speedup_ci_high']:.2f}]" in all_runs, rid
    # the closing note: median and worst error of the prediction (worst: k = 8, 12% high)
    note = md.split("## Cost model: predicted vs measured")[1]
    assert "worst 12.0%" in note and "median |error|" in note


def test_parent_run_holds_report_artifacts(sweep):
    client = sweep["client"]
    paths = {a.path for a in client.list_artifacts(sweep["parent"], "report")}
    assert paths == {"report/report.md", "report/runs.csv"} | {f"report/{name}.png" for name in FIGURES}


def test_runs_csv_holds_one_row_per_job_with_its_metrics(sweep, tmp_path):
    """runs.csv (the README's machine-readable source): every child once, its config and
    metrics equal to what the run logged."""
    import pandas as pd

    from analysis.load import load_runs
    from analysis.report import summary_frame

    runs = load_runs(sweep["uri"], parent_run_id=sweep["parent"])
    frame = summary_frame(runs)
    assert len(frame) == len(runs) and frame["run"].is_unique
    frame.to_csv(tmp_path / "runs.csv", index=False)
    back = pd.read_csv(tmp_path / "runs.csv")
    for row in back.to_dict("records"):
        logged = sweep["client"].get_run(next(r for r in runs["run_id"] if r.startswith(row["run"]))).data.metrics
        assert row["speedup"] == pytest.approx(logged["speedup"]) and row["tokens_per_s"] == pytest.approx(
            logged["tokens_per_s"]
        )


def test_parent_run_carries_best_speedups_with_intervals(sweep):
    m = sweep["client"].get_run(sweep["parent"]).data.metrics
    logged = sweep["logged"]
    for cat, key in WINNERS.items():
        rid = sweep["keys"][key]
        for name in ("", "_ci_low", "_ci_high"):
            assert m[f"best_speedup{name}/{cat}"] == pytest.approx(logged[rid][f"speedup{name}/{cat}"]), (cat, name)
    overall = max(logged, key=lambda rid: logged[rid]["speedup"])
    assert m["best_speedup_ci_low"] == pytest.approx(logged[overall]["speedup_ci_low"])
    assert m["prediction_error_worst"] == pytest.approx(0.12) and 0.05 < m["prediction_error_median"] < 0.12


def test_best_per_category_flags_a_runner_up_inside_the_interval():
    runs = pd.DataFrame(
        {
            "run_id": ["a" * 8, "b" * 8, "c" * 8],
            "params.method": ["small>target"] * 3,
            "params.draft_k": [1, 2, 4],
            "params.temperature": [0.0] * 3,
            "params.batch_size": [1] * 3,
            "metrics.speedup/qa": [1.30, 1.25, 1.00],
            "metrics.speedup_ci_low/qa": [1.20, 1.10, 0.9],
            "metrics.speedup_ci_high/qa": [1.40, 1.40, 1.1],
            "metrics.speedup/math": [1.30, 1.10, np.nan],
            "metrics.speedup_ci_low/math": [1.20, 1.00, np.nan],
            "metrics.speedup_ci_high/math": [1.40, 1.20, np.nan],
        }
    )
    best = best_per_category(runs).set_index("category")
    assert best.loc["qa", "run_id"] == "a" * 8 and best.loc["qa", "tie"]  # 1.25 is inside [1.20, 1.40]
    assert best.loc["math", "runner_up"] == 1.10 and not best.loc["math", "tie"]


def test_analysis_does_not_import_the_engine():
    """analysis/ reads the run schema (stagedspec.metrics: standard library only) and nothing
    else of the package: no torch, no transformers, no engine."""
    code = (
        "import sys, analysis.report; "
        "bad = {m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers') "
        "or (m.startswith('stagedspec.') and not m.startswith('stagedspec.metrics'))}; "
        "assert not bad, bad; assert 'stagedspec.metrics.run_schema' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_exactness_table_reports_divergences_of_greedy_runs_only():
    from analysis.report import exactness_table

    runs = pd.DataFrame(
        {
            "run_id": ["a" * 8, "b" * 8, "c" * 8],
            "params.method": ["small>target", "copy>target", "small>target"],
            "params.draft_k": [4, 10, 4],
            "params.temperature": [0.0, 0.0, 0.7],
            "params.batch_size": [1] * 3,
            "metrics.n_prompts": [3, 3, 3],
            "metrics.ar_match_rate": [2 / 3, 1.0, np.nan],
            "metrics.ar_divergences": [1, 0, np.nan],
            "metrics.ar_first_divergence_min": [17, np.nan, np.nan],
            "metrics.ar_divergence_gap_steps_max": [1.5, np.nan, np.nan],
        }
    )
    t = exactness_table(runs).set_index("method")
    assert list(t.index) == ["copy>target", "small>target"]  # the sampled run is left out
    assert t.loc["small>target", "identical to plain"] == "67% of 3"
    assert t.loc["small>target", "first divergence (token)"] == "17"
    assert t.loc["small>target", "widest top-two gap there (dtype steps)"] == "1.5"
    assert t.loc["copy>target", "identical to plain"] == "100% of 3"
    assert t.loc["copy>target", "first divergence (token)"] == "–"
    assert exactness_table(runs.drop(columns=["metrics.ar_match_rate"])).empty


def test_paper_table_takes_each_methods_headline_run_not_an_axis_point():
    """A sweep with a batch axis and a k axis beside its headline: the table's staged cell is
    the batch-1 run with the most tokens (the headline), not the batch-4 or the 32-token one
    that happen to sort last."""
    import pandas as pd

    from analysis.report import paper_table

    def run(method, batch, tokens, tps, speedup, temp=0.0):
        return {
            "params.method": method,
            "params.draft_k": 12,
            "params.temperature": temp,
            "params.batch_size": batch,
            "params.max_new_tokens": tokens,
            "metrics.tokens_per_s": tps,
            "metrics.speedup": speedup,
            "metrics.speedup_ci_low": speedup - 0.5,
            "metrics.speedup_ci_high": speedup + 0.5,
            "metrics.ar_tokens_per_s": 10.0,
        }

    staged = "ngram>small>copy>target"
    runs = pd.DataFrame(
        [
            run(staged, 1, 64, 33.6, 4.37),
            run("copy>target", 1, 64, 34.8, 4.57),
            run(staged, 1, 32, 21.0, 2.73),
            run(staged, 4, 32, 27.0, 1.12),
        ]
    )
    table = paper_table(runs)
    assert list(table["decoding"]) == ["greedy"]
    assert table.loc[0, staged] == "33.60 (4.37 [3.87, 4.87]×)"
    assert table.loc[0, "copy>target"] == "34.80 (4.57 [4.07, 5.07]×)"
    assert list(table.columns) == ["decoding", "plain (tokens/s)", "copy>target", staged]


def test_break_even_acceptance_by_hand():
    """Curve T(n) / T(1) = 1 + 0.5 (n - 1), a draft token at 0.25 forwards, so a chain of g costs 1 + 0.75 g:
    a chain of 1 pays once (1 + alpha) / 1.75 >= 1, alpha >= 0.75; a chain of 2 needs 1 + alpha + alpha^2 >= 2.5,
    alpha >= (sqrt(7) - 1) / 2 = 0.823: the break-even is 0.75. At alpha 0.9 the best chain is 1 (1.9 / 1.75 =
    1.0857 against 2.71 / 2.5 = 1.084); at 0.95 it is 3 (3.709875 / 3.25 = 1.1415 against 2.8525 / 2.5 = 1.141
    and 4.52438 / 4 = 1.131)."""
    from analysis.theory import best_chain, break_even_alpha

    curve = [1 + 0.5 * i for i in range(6)]
    assert abs(break_even_alpha(0.25, curve) - 0.75) < 1e-6
    assert best_chain(0.9, 0.25, curve) == (1, pytest.approx(1.9 / 1.75))
    assert best_chain(0.95, 0.25, curve) == (3, pytest.approx(3.709875 / 3.25))
    assert break_even_alpha(2.0, curve) == 1.0  # a draft dearer than the target never pays
    with pytest.raises(ValueError, match="starts at T"):
        best_chain(0.9, 0.25, [2.0, 3.0])
