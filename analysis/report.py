"""Rebuild a sweep's report from MLflow: figures, tables, report.md.

    python -m analysis.report experiment=NAME [tracking_uri=URI] [parent=RUN_ID] [out=DIR]

Defaults: tracking_uri = sqlite:///<absolute cwd>/mlflow.db, parent = the experiment's
most recent parent run, out = report/. Each job's ``view.html`` (a few answers, each
token coloured by the level that proposed it) is copied to ``views/`` and linked. The
PNGs, the views and report.md are also logged as artifacts of the parent run under ``report/``, and the best speedups with their 95%
intervals and the cost model's errors as the parent's metrics (``parent_metrics``);
those are the only writes to MLflow.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime, UTC
from pathlib import Path

import pandas as pd
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from .figures import FIGURES, FigureSkipped, prediction_errors
from .load import latest_parent, load_runs
from .runs import best_per_category, column, configs, fmt, metric, with_interval

log = logging.getLogger(__name__)

USAGE = __doc__.split("\n\n")[1]


def build_report(
    tracking_uri: str, experiment: str, out_dir, parent_run_id: str | None = None
) -> dict[str, pd.DataFrame]:
    """Draw every figure of one sweep into ``out_dir``, write ``report.md`` there, log both
    to the parent run, and return the plotted data per figure name (drawn figures only;
    report.md says why any other was skipped)."""
    parent = parent_run_id or latest_parent(tracking_uri, experiment)
    runs = load_runs(tracking_uri, experiment, parent)
    if runs.empty:
        raise LookupError(f"parent run {parent} of experiment {experiment!r} has no child runs")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    plotted: dict[str, pd.DataFrame] = {}
    skipped: dict[str, str] = {}
    for name, (draw, _, _) in FIGURES.items():
        path = out / f"{name}.png"
        try:
            plotted[name] = draw(runs, path)
        except FigureSkipped as why:
            skipped[name] = str(why)
            path.unlink(missing_ok=True)  # never leave a stale figure from an earlier build
            log.warning("figure %s skipped: %s", name, why)

    client = MlflowClient(tracking_uri=tracking_uri)
    views = fetch_views(client, runs, out / VIEWS_DIR)
    md = _markdown(experiment, tracking_uri, client.get_run(parent), runs, plotted, skipped, views)
    (out / "report.md").write_text(md, encoding="utf-8")
    summary_frame(runs).to_csv(out / SUMMARY_CSV, index=False)
    for name in plotted:
        client.log_artifact(parent, str(out / f"{name}.png"), artifact_path="report")
    if views:
        client.log_artifacts(parent, str(out / VIEWS_DIR), artifact_path=f"report/{VIEWS_DIR}")
    client.log_artifact(parent, str(out / "report.md"), artifact_path="report")
    client.log_artifact(parent, str(out / SUMMARY_CSV), artifact_path="report")
    _log_parent_metrics(client, parent, parent_metrics(runs))
    log.info("report for parent %s written to %s and logged to the parent run", parent, out)
    return plotted


SUMMARY_CSV = "runs.csv"
"""Beside report.md: one row per job, its config and every scalar metric, the machine-readable
source the README's generated figures are read from (``analysis/readme_results.py``)."""

SUMMARY_PARAMS = (
    "data",
    "data.name",
    "data.split",
    "data.limit",
    "max_new_tokens",
    "repeats",
    "seed",
    "target.weights",
)


def summary_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` as ``runs.csv`` holds it: run id, status, start time, the config columns of
    ``configs``, ``SUMMARY_PARAMS``, each level's ``k``, and every metric without a ``/step``
    suffix."""
    d = configs(runs)
    cols = {"run": d["run_id"].str[:8], "status": d["status"]}
    if "start_time" in d.columns:
        cols["start_time"] = d["start_time"].astype(str)
    for name in ("method", "draft_k", "temperature", "batch_size", "tree"):
        cols[name] = d[name]
    level_ks = sorted(c for c in d.columns if c.startswith("params.levels.") and c.endswith(".k"))
    for col in [f"params.{n}" for n in SUMMARY_PARAMS] + level_ks:
        if col in d.columns:
            cols[col[len("params.") :]] = d[col]
    for col in sorted(c for c in d.columns if c.startswith("metrics.") and not c.rsplit("/", 1)[-1].isdigit()):
        cols[col[len("metrics.") :]] = d[col]
    out = pd.DataFrame(cols)
    return out.sort_values(["method", "temperature", "draft_k", "batch_size"], kind="stable")


VIEW_ARTIFACT = "view.html"
VIEWS_DIR = "views"


def fetch_views(client: MlflowClient, runs: pd.DataFrame, out_dir: Path) -> dict[str, str]:
    """Each child's ``view.html`` copied to ``out_dir/<run id>.html``; returns run id ->
    the copy's path relative to the report (jobs logged before the view existed have none)."""
    found: dict[str, str] = {}
    for run_id in runs["run_id"]:
        try:
            if VIEW_ARTIFACT not in {a.path for a in client.list_artifacts(run_id)}:
                continue
            tmp = out_dir / f".{run_id}"
            tmp.mkdir(parents=True, exist_ok=True)
            dest = out_dir / f"{run_id}.html"
            Path(client.download_artifacts(run_id, VIEW_ARTIFACT, str(tmp))).replace(dest)
            tmp.rmdir()
        except (MlflowException, OSError) as e:  # an artifact store out of reach: the report goes on without it
            log.warning("view of run %s not fetched: %s", run_id, e)
            continue
        found[run_id] = f"{VIEWS_DIR}/{dest.name}"
    return found


def views_section(runs: pd.DataFrame, views: dict[str, str]) -> list[str]:
    """The links to each job's answers, coloured by level."""
    if not views:
        return ["_No job logged a `view.html` (jobs run before it existed)._"]
    out = [
        "Which level wrote which token: a few answers of each job, every token coloured by the level that "
        "proposed it (hover: its round, its depth, what the target did).",
        "",
    ]
    d = configs(runs)
    for r in d.sort_values(["method", "draft_k", "temperature"]).to_dict("records"):
        if r["run_id"] in views:
            out.append(
                f"- [{r['method']} k={fmt(r['draft_k'])} T={fmt(r['temperature'])} "
                f"bs={fmt(r['batch_size'])} (`{r['run_id'][:8]}`)]({views[r['run_id']]})"
            )
    return out


# ------------------------------------------------------------------------- markdown


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"
    return str(v).replace("|", "\\|")


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table (no tabulate dependency for one function)."""
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return "\n".join(lines)


def _number(v):
    # Integral config values (k, batch size) read better without a trailing ".000".
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _apart(r: dict) -> str:
    if pd.isna(r["runner_up"]):
        return "only run"
    if pd.isna(r["ci_low"]):
        return f"no interval; runner-up {r['runner_up']:.2f}"
    if r["tie"]:
        return f"no: runner-up {r['runner_up']:.2f} is inside the interval"
    return f"yes: runner-up {r['runner_up']:.2f} is below it"


def best_table(runs: pd.DataFrame) -> pd.DataFrame:
    best = best_per_category(runs, overall=True)
    if best.empty:
        return best
    rows = best.to_dict("records")
    return pd.DataFrame(
        {
            "category": best["category"],
            "speedup (×, 95% CI)": [with_interval(r["value"], r["ci_low"], r["ci_high"]) for r in rows],
            "apart from the runner-up?": [_apart(r) for r in rows],
            "method": best["method"],
            "draft_k": best["draft_k"].map(_number),
            "temperature": best["temperature"].map(lambda t: f"{t:g}"),
            "batch_size": best["batch_size"].map(_number),
            "tree": best["tree"],
            "run": best["run_id"].str[:8],
        }
    )


def headline_runs(g: pd.DataFrame) -> list[dict]:
    """One run per method (fewest levels first): of its runs, the one at the smallest batch
    size with the most new tokens (a sweep's headline job, not a point of its k or batch axis)."""
    d = g.assign(_tokens=pd.to_numeric(column(g, "params.max_new_tokens", default=0), errors="coerce").fillna(0))
    d = d.sort_values(["batch_size", "_tokens"], ascending=[True, False], kind="stable")
    best = d.drop_duplicates("method", keep="first").drop(columns="_tokens")
    return sorted(best.to_dict("records"), key=lambda r: (str(r["method"]).count(">"), str(r["method"])))


def paper_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The Staged SD paper's table (Spector & Ré 2023, Table 1): one row per decoding rule
    (greedy, sampled at T), one column per method: tokens/s, and in brackets the speedup
    over plain decoding measured in the same job [95% CI]. "plain" is the mean of the
    jobs' own interleaved baselines at that temperature."""
    d = configs(runs)
    if d.empty or "temperature" not in d:
        return pd.DataFrame()
    rows = []
    for temp, g in d.sort_values("temperature").groupby("temperature", sort=True):
        row = {"decoding": "greedy" if temp == 0 else f"sampled, T = {temp:g}"}
        ar = [metric(r, "ar_tokens_per_s") for r in g.to_dict("records")]
        ar = [a for a in ar if not pd.isna(a)]
        row["plain (tokens/s)"] = f"{sum(ar) / len(ar):.2f}" if ar else "–"
        for r in headline_runs(g):
            speed = with_interval(metric(r, "speedup"), metric(r, "speedup_ci_low"), metric(r, "speedup_ci_high"))
            row[str(r["method"])] = f"{metric(r, 'tokens_per_s'):.2f} ({speed}×)"
        rows.append(row)
    return pd.DataFrame(rows).fillna("–")


def runs_table(runs: pd.DataFrame) -> pd.DataFrame:
    d = configs(runs).sort_values(["method", "draft_k", "temperature", "batch_size"])
    rows = [
        {
            "method": r["method"],
            "draft_k": _number(r["draft_k"]),
            "temperature": f"{r['temperature']:g}",
            "batch_size": _number(r["batch_size"]),
            "tree": r["tree"],
            "acceptance": metric(r, "acceptance_rate"),
            "α̂": metric(r, "alpha_hat"),
            "tokens/call": metric(r, "mean_acceptance_length"),
            "speedup (×, 95% CI)": with_interval(
                metric(r, "speedup"), metric(r, "speedup_ci_low"), metric(r, "speedup_ci_high")
            ),
            "predicted (×)": metric(r, "predicted_speedup"),
            "tokens/s": f"{metric(r, 'tokens_per_s'):.1f}",
            "timing spread": metric(r, "timing_spread"),
            "status": r["status"],
            "run": r["run_id"][:8],
        }
        for r in d.to_dict("records")
    ]
    return pd.DataFrame(rows)


def exactness_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Greedy runs with a plain baseline: the share of prompt turns whose output is plain
    decoding's, and where one is not, the earliest token where an output leaves it and the
    widest top-two logit gap of the target at such a token, in steps of its dtype."""
    d = configs(runs)
    if d.empty or "metrics.ar_match_rate" not in d:
        return pd.DataFrame()
    d = d[(d["temperature"] == 0) & d["metrics.ar_match_rate"].notna()].sort_values(["method", "draft_k"])
    rows = []
    for r in d.to_dict("records"):
        n = metric(r, "n_prompts")
        found = metric(r, "ar_divergences")
        rows.append(
            {
                "method": r["method"],
                "draft_k": _number(r["draft_k"]),
                "identical to plain": f"{metric(r, 'ar_match_rate'):.0%}" + (f" of {n:.0f}" if not pd.isna(n) else ""),
                "first divergence (token)": "–" if not found > 0 else f"{metric(r, 'ar_first_divergence_min'):.0f}",
                "widest top-two gap there (dtype steps)": "–"
                if not found > 0
                else f"{metric(r, 'ar_divergence_gap_steps_max'):.1f}",
                "run": r["run_id"][:8],
            }
        )
    return pd.DataFrame(rows)


def parent_metrics(runs: pd.DataFrame) -> dict[str, float]:
    """What the parent run shows of its sweep: the best speedup overall and per category,
    each with its 95% interval (``best_speedup``, ``best_speedup_ci_low``, ...,
    ``best_speedup/<category>``), and the cost model's median and worst |error|."""
    out: dict[str, float] = {}
    for r in best_per_category(runs, overall=True).to_dict("records"):
        tail = "" if r["category"] == "all" else f"/{r['category']}"
        out[f"best_speedup{tail}"] = r["value"]
        if not pd.isna(r["ci_low"]):
            out[f"best_speedup_ci_low{tail}"] = r["ci_low"]
            out[f"best_speedup_ci_high{tail}"] = r["ci_high"]
    errors = prediction_errors(configs(runs)).abs().dropna()
    if not errors.empty:
        out["prediction_error_median"] = float(errors.median())
        out["prediction_error_worst"] = float(errors.max())
    return out


def _log_parent_metrics(client: MlflowClient, parent: str, metrics: dict[str, float]) -> None:
    from mlflow.entities import Metric

    now = int(datetime.now(UTC).timestamp() * 1000)
    items = [Metric(k, float(v), now, 0) for k, v in metrics.items()]
    for i in range(0, len(items), 100):
        client.log_batch(parent, metrics=items[i : i + 100])


def prediction_note(runs: pd.DataFrame) -> list[str]:
    """The closing note on the cost model: how far its prediction is from each measured
    speedup, median and worst."""
    d = configs(runs)
    d = d.assign(error=prediction_errors(d)).dropna(subset=["error"])
    if d.empty:
        return ["_No run logged both predicted_speedup and speedup._"]
    worst = d.loc[d["error"].abs().idxmax()]
    within = int((d["error"].abs() <= 0.10).sum())
    return [
        f"Predicted speedup vs measured, over {len(d)} run(s): median |error| {d['error'].abs().median():.1%}, "
        f"worst {abs(worst['error']):.1%} ({worst['method']} k={fmt(worst['draft_k'])} T={fmt(worst['temperature'])} "
        f"bs={fmt(worst['batch_size'])}, run `{worst['run_id'][:8]}`: predicted "
        f"{metric(worst, 'predicted_speedup'):.2f}×, measured {metric(worst, 'speedup'):.2f}×); "
        f"{within} of {len(d)} within 10%.",
        "",
        "Each job predicts before it times anything, out of sample (`stagedspec/evaluation/prediction.py`, "
        "`stagedspec/metrics/cost_model.py`): it decodes a few prompts it does not evaluate (first turns of "
        "held-out questions of the same set, `prediction.source=heldout`, or the training templates; param "
        "`prediction.calibration` names them) with the method and with plain decoding, takes from that "
        "calibration alone the rounds' yields (tokens per target call), the mean round time, the prefill and "
        "plain decoding's time per token, and predicts rounds and wall time for `max_new_tokens` per row, "
        "hence the speedup. A gap is where the evaluated prompts are easier or harder to draft than the "
        "calibration's (how much an answer copies its prompt varies from problem to problem), where answers "
        "stop early at EOS, or timing drift between the calibration and the run. The same formulas fed with the run's own timings are logged as "
        "`accounted_speedup` (`accounting_error`: a check of the bookkeeping, not a prediction).",
    ]


def _markdown(experiment, tracking_uri, parent, runs, plotted, skipped, views=None) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    statuses = runs["status"].value_counts()
    status_text = ", ".join(f"{n} {s.lower()}" for s, n in statuses.items())
    out = [
        f"# Sweep report: {experiment}",
        "",
        f"- Parent run: `{parent.info.run_id}` ({parent.info.run_name})",
        f"- Tracking URI: `{tracking_uri}`",
        f"- Child runs: {len(runs)} ({status_text})",
        f"- Built: {when} by `python -m analysis.report`",
        "",
        "## Tokens per second by method (the Staged SD paper's table)",
        "",
    ]
    paper = paper_table(runs)
    out.append(markdown_table(paper) if not paper.empty else "_No run logged tokens per second._")
    out += [
        "",
        "Each cell: tokens/s of the method (speedup over plain decoding timed in the same job, interleaved per "
        "batch [95% CI]). Methods name their levels, lowest first: `ngram>small>copy>target` is the staged "
        "default, `small>target` standard speculative decoding, `copy>target` prompt lookup.",
        "",
        "## Best configuration per category (by speedup)",
        "",
    ]
    best = best_table(runs)
    out.append(markdown_table(best) if not best.empty else "_No run logged a speedup metric._")
    if not best.empty:
        out += [
            "",
            "Speedups are pooled over each job's prompts (method and baseline interleaved per batch, "
            "`repeats` times) with a 95% t interval over prompts (over repeats when a category has one "
            "prompt). The best of many noisy runs is biased upwards: a winner whose runner-up lies inside its "
            "interval is not shown to be better.",
        ]
    out += ["", "## Figures", ""]
    for i, (name, (_, heading, caption)) in enumerate(FIGURES.items()):
        out.append(f"### ({chr(ord('a') + i)}) {heading}")
        out.append("")
        if name in skipped:
            out.append(f"**Not drawn** (`{name}.png`): {skipped[name]}.")
        else:
            out += [f"![{heading}]({name}.png)", "", caption]
            for note in plotted[name].attrs.get("notes", []):
                out.append(f"- _{note}_")
        out.append("")
    out += ["## All runs", "", markdown_table(runs_table(runs)), ""]
    exact = exactness_table(runs)
    if not exact.empty:
        out += [
            "## Greedy outputs against plain decoding",
            "",
            markdown_table(exact),
            "",
            "In float32 with `kernels=hf` greedy speculation reproduces plain decoding token for token (the "
            "tests hold it). In bfloat16 a forward scoring several rows rounds differently from a one-row "
            "forward, so where the target's two likeliest tokens are a near-tie the pick can flip; each "
            "differing output is reported with the first token where it leaves plain decoding's and the "
            "target's top-two logit gap there (`divergence` in the job's `outputs.jsonl`). A gap of a few "
            "steps of the dtype is rounding; a wide one would be a bug.",
            "",
        ]
    out += ["## Answers, coloured by level", "", *views_section(runs, views or {}), ""]
    out += ["## Cost model: predicted vs measured", "", *prediction_note(runs), ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------ CLI


def parse_args(argv: list[str]) -> dict[str, str]:
    keys = {"experiment", "tracking_uri", "parent", "out"}
    args = {}
    for item in argv:
        key, sep, value = item.lstrip("-").partition("=")
        if not sep or key not in keys:
            raise SystemExit(f"unexpected argument {item!r}\nusage: {USAGE.strip()}")
        args[key] = value
    if "experiment" not in args:
        raise SystemExit(f"experiment=NAME is required\nusage: {USAGE.strip()}")
    args.setdefault("tracking_uri", f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}")
    args.setdefault("out", "report")
    return args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help", "help") for a in argv):
        print(__doc__)
        return
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        plotted = build_report(args["tracking_uri"], args["experiment"], args["out"], args.get("parent"))
    except (LookupError, FileNotFoundError) as e:  # missing experiment / parent / runs: a message, not a traceback
        raise SystemExit(f"error: {e}") from None
    print(f"{len(plotted)} figures and report.md written to {Path(args['out']).resolve()}")


if __name__ == "__main__":
    main()
