"""MLflow, in one place: the only module that writes runs (the Hydra callback that opens
a sweep's parent run before any job starts is ``sweep_callback.py``).

One parent run per sweep (tag ``stagedspec.role=parent``, keyed by ``stagedspec.sweep_id``
so a re-run of the same sweep reattaches to it) and one child run per job
(``stagedspec.role=child``, ``mlflow.parentRunId``, ``stagedspec.config_hash``).

Why it looks like this:
- The database, the experiment and the parent are created *before* jobs start (by
  ``TrackingCallback``, registered in conf/config.yaml), and only after every job's config
  passed ``validate_cfg``: parallel jobs racing to create a fresh SQLite database or the
  same experiment have lost runs. Jobs find the parent by an environment variable, or a
  file in the sweep directory on other machines.
- Everything goes through an ``MlflowClient`` with explicit run ids, never the global
  "active run": jobs of a sweep share a process with the basic launcher.
- Resume: a job whose config hash already has a FINISHED child is skipped. A job killed
  mid-way leaves a RUNNING (or FAILED) child; the re-run deletes it and starts afresh, so
  each job has exactly one FINISHED child and the active view holds no stale ones.

What a reader of the MLflow UI gets (MLflow has no API to order metrics or to pick the
runs table's default columns, so):
- every run's description (``mlflow.note.content``, the run page's first block) holds its
  headline numbers; a parent's holds a table of its jobs, best first;
- the headline metrics (``HEADLINE``) are logged first, in their own batch;
- the experiment carries a shared view (``mlflow.sharedViewState.<key>``, the UI's "share"
  format) whose link opens the runs table with the headline metrics as columns, sorted by
  speedup; ``ui_url`` prints it, and the experiment description links it;
- per-position acceptance is one metric, ``position_acceptance``, with step = position.

The texts (headline, descriptions, the view) are composed in ``tracking_text.py``.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from stagedspec.metrics.run_schema import PARENT_TAG, ROLE_TAG
from .tracking_text import EXPERIMENT_NOTE, HEADLINE, headline_view, parent_note

log = logging.getLogger(__name__)

HASH_TAG = "stagedspec.config_hash"
SWEEP_TAG = "stagedspec.sweep_id"
NOTE_TAG = "mlflow.note.content"  # a run's or experiment's description in the UI
KIND_TAG = "mlflow.experimentKind"
"""The experiment's kind: MLflow 3.x UIs before the GenAI/Model training switch open an
experiment in that mode by it; 3.17 reads the link's ``workflowType`` (``ui_url``) or the
switch instead (docs/mlflow.md)."""
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
VIEW_KEY = "stagedspec-headline"
MAX_PARAM_LEN = 6000  # MLflow's limit on a param value
PARENT_ENV = "STAGEDSPEC_PARENT_RUN_ID"
SWEPT_ENV = "STAGEDSPEC_SWEPT_KEYS"
PARENT_FILE = "mlflow_parent_run.json"
SYSTEM_METRICS_INTERVAL_S = 5.0
"""psutil samples every 5 s, one small write each: a few per job, no measurable cost."""

STEPPED = ("position_acceptance",)
"""``<name>/<i>`` metrics logged as one metric ``<name>`` with step i (a line in the UI)."""
CONTEXT_TAGS = (
    "mlflow.user",
    "mlflow.source.name",
    "mlflow.source.type",
    "mlflow.source.git.commit",
    "mlflow.source.git.branch",
    "mlflow.source.git.repoURL",
    "stagedspec.git_dirty",
)


def default_artifact_location(uri: str) -> str | None:
    """For ``sqlite:////abs/dir/x.db``: ``file:///abs/dir/mlartifacts`` (next to the
    database, not in whatever directory a job happens to start in). Else the store's own."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///") :]).resolve().parent / "mlartifacts").as_uri()
    return None


class Tracker:
    def __init__(
        self,
        uri: str,
        experiment_name: str,
        artifact_location: str | None = None,
        system_metrics: bool = False,
    ) -> None:
        from mlflow import MlflowClient

        if uri.startswith("sqlite:///"):
            Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self.system_metrics = system_metrics
        self._monitors: dict[str, Any] = {}
        self.experiment_id = self._experiment(experiment_name, artifact_location or default_artifact_location(uri))

    def _experiment(self, name: str, artifact_location: str | None) -> str:
        from mlflow.exceptions import MlflowException

        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            try:
                exp_id = self.client.create_experiment(name, artifact_location=artifact_location)
            except MlflowException:  # another process created it first
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise
            else:
                exp = self.client.get_experiment(exp_id)
        if exp.lifecycle_stage == "deleted":
            self.client.restore_experiment(exp.experiment_id)
        self._experiment_tags(exp)
        return exp.experiment_id

    def _experiment_tags(self, exp: Any) -> None:
        """Description, the UI's "model training" mode and the headline view; a
        description or kind someone else set is left alone."""
        tags = exp.tags or {}
        want = {VIEW_TAG_PREFIX + VIEW_KEY: json.dumps(headline_view())}
        if NOTE_TAG not in tags:
            want[NOTE_TAG] = EXPERIMENT_NOTE.format(name=exp.name, id=exp.experiment_id, key=VIEW_KEY)
        if KIND_TAG not in tags:
            want[KIND_TAG] = "custom_model_development"
        for k, v in want.items():
            if tags.get(k) != v:
                self.client.set_experiment_tag(exp.experiment_id, k, v)

    def _search(self, *filters: str) -> list[Any]:
        return list(
            self.client.search_runs([self.experiment_id], filter_string=" and ".join(filters), max_results=1000)
        )

    def parent_run(self, sweep_id: str, name: str, tags: dict[str, str]) -> str:
        """The parent run of sweep ``sweep_id``: found again if it exists, else created."""
        runs = self._search(f"tags.`{ROLE_TAG}` = 'parent'", f"tags.`{SWEEP_TAG}` = '{sweep_id}'")
        if runs:
            run_id = runs[0].info.run_id
            log.info("reattaching to parent run %s of sweep %s", run_id, sweep_id)
            self.client.update_run(run_id, status="RUNNING", name=name)
            return run_id
        run = self.client.create_run(
            self.experiment_id, run_name=name, tags={**tags, ROLE_TAG: "parent", SWEEP_TAG: sweep_id}
        )
        log.info("created parent run %s for sweep %s in %s", run.info.run_id, sweep_id, self.uri)
        return run.info.run_id

    def finished_child(self, config_hash: str) -> str | None:
        """Run id of a FINISHED child with this config hash, if any."""
        runs = self._search(f"tags.`{HASH_TAG}` = '{config_hash}'", "attributes.status = 'FINISHED'")
        return runs[0].info.run_id if runs else None

    def start_child(
        self, parent_run_id: str | None, config_hash: str, name: str, tags: dict[str, str], redo_finished: bool = False
    ) -> str:
        """A new child run, with the parent's run-context tags (user, source, git), and
        system metrics sampled while it runs (``tracking.system_metrics``). Earlier runs
        of this job that did not finish (killed, failed) are deleted (soft: ``mlflow gc``
        or the UI can still see them), and with ``redo_finished`` the finished ones too,
        so one active run per job remains."""
        for old in self._search(f"tags.`{HASH_TAG}` = '{config_hash}'"):
            if old.info.status != "FINISHED" or redo_finished:
                log.info("deleting earlier run %s (%s) of this job; redoing it", old.info.run_id, old.info.status)
                self.client.delete_run(old.info.run_id)
        context = self._parent_context(parent_run_id) if parent_run_id else context_tags()
        tags = {**context, **tags, ROLE_TAG: "child", HASH_TAG: config_hash}
        if parent_run_id:
            tags[PARENT_TAG] = parent_run_id
        run_id = self.client.create_run(self.experiment_id, run_name=name, tags=tags).info.run_id
        if self.system_metrics:
            self._start_monitor(run_id)
        return run_id

    def _parent_context(self, parent_run_id: str) -> dict[str, str]:
        """The parent's context tags: resolved once, in the process that read the command
        line (a joblib or SLURM worker would see its own entry point, not ours)."""
        tags = self.client.get_run(parent_run_id).data.tags
        return {k: v for k, v in tags.items() if k in CONTEXT_TAGS}

    def _start_monitor(self, run_id: str) -> None:
        try:
            mon = held_system_metrics_monitor(run_id, SYSTEM_METRICS_INTERVAL_S, self.uri)
            mon.start()
            self._monitors[run_id] = mon
        except Exception as e:  # psutil missing, ...: the job runs without them
            log.warning("system metrics off for run %s: %s", run_id, e)

    def log(
        self,
        run_id: str,
        params: dict[str, Any] | None = None,
        metrics: dict[str, float] | None = None,
        tags: dict[str, Any] | None = None,
        step: int = 0,
    ) -> None:
        """Params, metrics and tags; the ``HEADLINE`` metrics first, in their own batch
        (the UI lists a run's metrics in logging order); ``STEPPED`` metrics
        (``position_acceptance/<i>``) as one metric with step i. Values are rounded to
        ``SIGNIFICANT`` digits (the UI prints every digit and clips the column);
        metrics.json among the artifacts keeps them whole."""
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.utils.time import get_current_time_millis

        now = get_current_time_millis()
        p = [Param(k, _param_value(k, v)) for k, v in (params or {}).items()]
        t = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        m = [Metric(k, _rounded(v), now, step) for k, v in (metrics or {}).items() if k in HEADLINE and _finite(v)]
        m.sort(key=lambda x: HEADLINE.index(x.key))
        rest = []
        for k, v in (metrics or {}).items():
            if k in HEADLINE or not _finite(v):
                continue
            name, _, position = k.rpartition("/")
            if name in STEPPED and position.isdigit():
                rest.append(Metric(name, _rounded(v), now, int(position)))
            else:
                rest.append(Metric(k, _rounded(v), now, step))
        self._batches(run_id, m, p, t)
        self._batches(run_id, rest, [], [])

    def _batches(self, run_id: str, m: list, p: list, t: list) -> None:
        for i in range(0, max(len(p), len(m), len(t)), 100):  # MLflow caps a batch at 100 params/tags
            self.client.log_batch(run_id, metrics=m[i : i + 100], params=p[i : i + 100], tags=t[i : i + 100])

    def describe(self, run_id: str, markdown: str) -> None:
        """The run's description: the first thing its page shows."""
        self.client.set_tag(run_id, NOTE_TAG, markdown)

    def log_artifact(self, run_id: str, path: str | Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(run_id, str(path), artifact_path)

    def log_table(self, run_id: str, table: Any, artifact_file: str) -> None:
        """A table (dict of columns or DataFrame) the UI shows as a table (``log_table``)."""
        self.client.log_table(run_id, table, artifact_file)

    def log_prompt_set(
        self,
        run_id: str,
        questions: list[Any],
        name: str,
        source: str | None,
        context: str = "eval",
    ) -> None:
        """The job's prompts as a dataset input (``mlflow.data``): name, a digest of the
        very prompts, where they were read from; the runs table's Dataset column."""
        import mlflow.data
        import pandas as pd
        from mlflow.entities import DatasetInput, InputTag

        n_turns = max((len(q.turns) for q in questions), default=0)
        df = pd.DataFrame(
            [
                {
                    "question_id": q.question_id,
                    "category": q.category,
                    **{f"turn_{i + 1}": (q.turns[i] if i < len(q.turns) else None) for i in range(n_turns)},
                }
                for q in questions
            ]
        )
        from mlflow.data.sources import LocalArtifactDatasetSource

        with warnings.catch_warnings():  # "integer columns cannot hold missing values": not a model schema here
            warnings.simplefilter("ignore", UserWarning)
            ds = mlflow.data.from_pandas(df, source=LocalArtifactDatasetSource(source or name), name=name)
            entity = ds._to_mlflow_entity()
        self.client.log_inputs(run_id, [DatasetInput(entity, [InputTag("mlflow.data.context", context)])])

    def end(self, run_id: str, status: str = "FINISHED") -> None:
        mon = self._monitors.pop(run_id, None)
        if mon is not None:
            mon.finish()
            try:
                self._batches(run_id, mon.held, [], [])
            except Exception as e:  # a lost sample is not worth a failed run
                log.warning("system metrics of run %s not logged: %s", run_id, e)
        self.client.set_terminated(run_id, status=status)

    def children(self, parent_run_id: str) -> list[Any]:
        return self._search(f"tags.`{PARENT_TAG}` = '{parent_run_id}'", "attributes.status = 'FINISHED'")

    def summarize_parent(self, parent_run_id: str) -> None:
        """The sweep's headline on its parent: the best job's (by speedup) headline
        metrics, and a description with every job's, best first."""
        runs = self.children(parent_run_id)
        if not runs:
            return
        ranked = sorted(runs, key=lambda r: -r.data.metrics.get("speedup", -math.inf))
        best = ranked[0]
        self.log(
            parent_run_id,
            metrics={k: best.data.metrics[k] for k in HEADLINE if k in best.data.metrics},
            tags={"stagedspec.best_run": best.info.run_id},
        )
        self.describe(parent_run_id, parent_note(ranked))


class NoTracker:
    """Tracking off (``tracking.uri`` empty): ``Tracker``'s interface, every method doing
    nothing, so a job logs the same way whether or not anything records it."""

    uri = None
    experiment_id = None

    def parent_run(self, sweep_id: str, name: str, tags: dict[str, str]) -> None:
        return None

    def finished_child(self, config_hash: str) -> str | None:
        return None  # nothing recorded, nothing to skip

    def start_child(
        self, parent_run_id: str | None, config_hash: str, name: str, tags: dict[str, str], redo_finished: bool = False
    ) -> None:
        return None

    def log(
        self,
        run_id: str | None,
        params: dict[str, Any] | None = None,
        metrics: dict[str, float] | None = None,
        tags: dict[str, Any] | None = None,
        step: int = 0,
    ) -> None:
        pass

    def describe(self, run_id: str | None, markdown: str) -> None:
        pass

    def log_artifact(self, run_id: str | None, path: str | Path, artifact_path: str | None = None) -> None:
        pass

    def log_table(self, run_id: str | None, table: Any, artifact_file: str) -> None:
        pass

    def log_prompt_set(
        self,
        run_id: str | None,
        questions: list[Any],
        name: str,
        source: str | None,
        context: str = "eval",
    ) -> None:
        pass

    def end(self, run_id: str | None, status: str = "FINISHED") -> None:
        pass

    def children(self, parent_run_id: str) -> list[Any]:
        return []

    def summarize_parent(self, parent_run_id: str) -> None:
        pass


def held_system_metrics_monitor(run_id: str, interval_s: float, uri: str) -> Any:
    """MLflow's system metrics monitor (CPU, memory, disk, network through psutil), its
    samples held until the run ends (``mon.held``, logged by ``Tracker.end``) instead of
    written as they come: a run's first-logged metrics are the first its page lists, and
    those must be the headline, not ``system/cpu_utilization_percentage``."""
    from mlflow.entities import Metric
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
    from mlflow.utils.time import get_current_time_millis

    class Held(SystemMetricsMonitor):
        held: list = []

        def publish_metrics(self, metrics: dict[str, float]) -> None:
            now = get_current_time_millis()
            prefix = self._metrics_prefix + (self.node_id + "/" if self.node_id else "")
            self.held = [
                *self.held,
                *(Metric(prefix + k, float(v), now, self._logging_step) for k, v in metrics.items()),
            ]
            self._logging_step += 1
            for monitor in self.monitors:
                monitor.clear_metrics()

    return Held(run_id, sampling_interval=interval_s, tracking_uri=uri)


def _finite(v: Any) -> bool:
    return v is not None and not math.isnan(float(v))


SIGNIFICANT = 4
"""Timing noise is ~15% between runs on this machine: digits past the fourth are noise."""


def _rounded(v: Any) -> float:
    v = float(v)
    return v if v.is_integer() or math.isinf(v) else float(f"{v:.{SIGNIFICANT}g}")


def _param_value(key: str, value: Any) -> str:
    text = "None" if value is None else str(value)
    if len(text) > MAX_PARAM_LEN:
        log.warning("param %s is %d characters long; truncated to MLflow's %d", key, len(text), MAX_PARAM_LEN)
        text = text[: MAX_PARAM_LEN - 3] + "..."
    return text


def context_tags() -> dict[str, str]:
    """Who ran what from where: MLflow's own run-context resolvers (user, source name and
    type, git commit, branch and repository), plus whether tracked files differed from
    the commit (``stagedspec.git_dirty``), which MLflow does not record."""
    from mlflow.tracking.context.registry import resolve_tags

    tags = {k: v for k, v in resolve_tags().items() if k in CONTEXT_TAGS}
    if "mlflow.source.git.commit" in tags:
        try:
            import git  # GitPython, an MLflow dependency

            repo = git.Repo(Path(tags.get("mlflow.source.name", ".")).resolve().parent, search_parent_directories=True)
            tags["stagedspec.git_dirty"] = str(repo.is_dirty(untracked_files=False)).lower()
        except Exception:  # not a repository after all, git missing: no dirty flag
            pass
    return tags


def tracker_for(cfg: DictConfig) -> Tracker | None:
    """The tracker a config names (``tracking.uri``), or None when tracking is off."""
    tracking = cfg.get("tracking")
    uri = None if tracking is None else tracking.get("uri")
    if not uri:
        return None
    return Tracker(
        uri, cfg.experiment_name, tracking.get("artifact_location"), bool(tracking.get("system_metrics", False))
    )


def ui_url(tracker: Tracker, host: str = "http://127.0.0.1:5000") -> str:
    """The link that opens the experiment's runs table with the headline columns."""
    return (
        f"{host}/#/experiments/{tracker.experiment_id}/runs?viewStateShareKey={VIEW_KEY}&workflowType=machine_learning"
    )
