"""Rebuild a sweep's report from MLflow: figures, tables, report.md.

    python -m analysis.report experiment=NAME [tracking_uri=URI] [parent=RUN_ID] [out=DIR]

Defaults: tracking_uri = sqlite:///<absolute cwd>/mlflow.db, parent = the experiment's
most recent parent run, out = report/. The PNGs and report.md are also logged as
artifacts of the parent run under ``report/``; that is the only write to MLflow.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
from mlflow import MlflowClient

from analysis.figures import FIGURES, FigureSkipped
from analysis.load import latest_parent, load_runs
from analysis.runs import best_per_category, configs, metric

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
    md = _markdown(experiment, tracking_uri, client.get_run(parent), runs, plotted, skipped)
    (out / "report.md").write_text(md, encoding="utf-8")
    for name in plotted:
        client.log_artifact(parent, str(out / f"{name}.png"), artifact_path="report")
    client.log_artifact(parent, str(out / "report.md"), artifact_path="report")
    log.info("report for parent %s written to %s and logged to the parent run", parent, out)
    return plotted


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


def best_table(runs: pd.DataFrame) -> pd.DataFrame:
    best = best_per_category(runs, overall=True)
    if best.empty:
        return best
    return pd.DataFrame({
        "category": best["category"], "speedup (×)": best["value"], "method": best["method"],
        "draft_k": best["draft_k"].map(_number), "temperature": best["temperature"].map(lambda t: f"{t:g}"),
        "batch_size": best["batch_size"].map(_number), "tree": best["tree"],
        "run": best["run_id"].str[:8],
    })


def runs_table(runs: pd.DataFrame) -> pd.DataFrame:
    d = configs(runs).sort_values(["method", "draft_k", "temperature", "batch_size"])
    rows = [{
        "method": r["method"], "draft_k": _number(r["draft_k"]), "temperature": f"{r['temperature']:g}",
        "batch_size": _number(r["batch_size"]), "tree": r["tree"],
        "acceptance": metric(r, "acceptance_rate"),
        "tokens/call": metric(r, "mean_accepted_tokens_per_call"),
        "speedup (×)": metric(r, "speedup"), "tokens/s": f"{metric(r, 'tokens_per_s'):.1f}",
        "status": r["status"], "run": r["run_id"][:8],
    } for r in d.to_dict("records")]
    return pd.DataFrame(rows)


def _markdown(experiment, tracking_uri, parent, runs, plotted, skipped) -> str:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
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
        "## Best configuration per category (by speedup)",
        "",
    ]
    best = best_table(runs)
    out.append(markdown_table(best) if not best.empty else "_No run logged a speedup metric._")
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
