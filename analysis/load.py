"""Read a sweep's runs out of MLflow into one DataFrame.

The tracker writes one parent run per sweep (tag ``stagedspec.role=parent``) and one
child run per job (``stagedspec.role=child``, ``mlflow.parentRunId``). Children carry the
flattened resolved config as params and the decoding statistics as metrics. This module
only reads; the report's artifact upload is the one write, and it lives in ``report.py``.

A stepped metric (``position_acceptance``, step = draft position) becomes one column per
step, ``metrics.position_acceptance/<step>``, the layout runs logged before it was
stepped already have, so the figures read both.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import ViewType

from stagedspec.metrics.run_schema import PARENT_TAG, ROLE_TAG


class ExperimentNotFound(LookupError):
    """The named experiment is not in the tracking store."""


def _client(tracking_uri: str) -> MlflowClient:
    # Opening a SQLite URI that names no file creates an empty database there: a typo'd
    # path would "succeed" with no experiments and leave a stray mlflow.db behind.
    if tracking_uri.startswith("sqlite:///"):
        path = Path(tracking_uri[len("sqlite:///") :].split("?", 1)[0])
        if str(path) != ":memory:" and not path.is_file():
            raise FileNotFoundError(f"no MLflow database at {path} (tracking URI {tracking_uri})")
    return MlflowClient(tracking_uri=tracking_uri)


def _experiment_id(client: MlflowClient, tracking_uri: str, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None and exp.lifecycle_stage == "active":
        return exp.experiment_id
    names = sorted(e.name for e in _all_pages(client.search_experiments))
    why = "is deleted" if exp is not None else "does not exist"
    raise ExperimentNotFound(
        f"MLflow experiment {name!r} {why} at {tracking_uri}; "
        f"existing experiments: {', '.join(map(repr, names)) or '(none)'}"
    )


def _all_pages(search, *args, **kwargs) -> list:
    """Every result of a paged MLflow search, not just its first page."""
    out, token = [], None
    while True:
        page = search(*args, page_token=token, **kwargs)
        out.extend(page)
        token = page.token
        if not token:
            return out


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "\\'") + "'"


def _maybe_numeric(col: pd.Series) -> pd.Series:
    # MLflow stores every param as a string. pandas 3 dropped errors="ignore", so a
    # column that is not wholly numeric (e.g. tree="chain", method) stays as text.
    try:
        return pd.to_numeric(col)
    except (ValueError, TypeError):
        return col


STEPPED = ("position_acceptance",)
"""Metrics logged as one key with step = position (``stagedspec/app/tracking.py``)."""


def _stepped(client: MlflowClient, run_id: str, key: str) -> dict[str, float]:
    """``{"<key>/<step>": value}`` from a metric's history (the latest value per step)."""
    latest: dict[int, tuple[int, float]] = {}
    for m in client.get_metric_history(run_id, key):
        if m.step not in latest or m.timestamp >= latest[m.step][0]:
            latest[m.step] = (m.timestamp, m.value)
    return {f"{key}/{step}": value for step, (_, value) in sorted(latest.items())}


def latest_parent(tracking_uri: str, experiment: str) -> str:
    """Run id of the most recently started parent (sweep) run of ``experiment``."""
    client = _client(tracking_uri)
    exp_id = _experiment_id(client, tracking_uri, experiment)
    runs = client.search_runs(
        [exp_id],
        filter_string=f"tags.`{ROLE_TAG}` = 'parent'",
        max_results=1,
        order_by=["attributes.start_time DESC"],
    )
    if not runs:
        raise LookupError(f"experiment {experiment!r} has no parent run (tag {ROLE_TAG}=parent)")
    return runs[0].info.run_id


def load_runs(tracking_uri: str, experiment: str | None = None, parent_run_id: str | None = None) -> pd.DataFrame:
    """Child runs as one row each: ``run_id``, ``params.*``, ``metrics.*``, ``tags.*``.

    With ``parent_run_id`` only that sweep's children; with just ``experiment`` every
    child in it. Only FINISHED runs count. Params are converted with ``pd.to_numeric`` where a whole column parses.
    """
    if experiment is None and parent_run_id is None:
        raise ValueError("load_runs needs an experiment name, a parent run id, or both")
    client = _client(tracking_uri)
    if experiment is not None:
        exp_id = _experiment_id(client, tracking_uri, experiment)
    else:
        exp_id = client.get_run(parent_run_id).info.experiment_id
    # only finished jobs: a job that failed and was not re-run yet has no complete metrics
    filters = [f"tags.`{ROLE_TAG}` = 'child'", "attributes.status = 'FINISHED'"]
    if parent_run_id is not None:
        filters.append(f"tags.`{PARENT_TAG}` = {_quoted(parent_run_id)}")
    runs = _all_pages(
        client.search_runs,
        [exp_id],
        filter_string=" and ".join(filters),
        run_view_type=ViewType.ACTIVE_ONLY,
        order_by=["attributes.start_time ASC"],
    )

    rows = []
    for run in runs:
        row = {
            "run_id": run.info.run_id,
            "run_name": run.info.run_name,
            "status": run.info.status,
            "start_time": pd.to_datetime(run.info.start_time, unit="ms"),
        }
        row.update({f"params.{k}": v for k, v in run.data.params.items()})
        metrics = {k: v for k, v in run.data.metrics.items() if k not in STEPPED}
        for key in STEPPED:
            if key in run.data.metrics:
                metrics.update(_stepped(client, run.info.run_id, key))
        row.update({f"metrics.{k}": v for k, v in metrics.items()})
        row.update({f"tags.{k}": v for k, v in run.data.tags.items()})
        rows.append(row)
    df = pd.DataFrame(rows, columns=None if rows else ["run_id", "run_name", "status", "start_time"])
    first = ["run_id", "run_name", "status", "start_time"]
    df = df[first + sorted(c for c in df.columns if c not in first)]
    for col in df.columns:
        if col.startswith("params."):
            df[col] = _maybe_numeric(df[col])
    return df.reset_index(drop=True)
