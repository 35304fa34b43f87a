"""MLflow, in one place: the only module that writes runs, and the Hydra callback that
opens a sweep's parent run before any job starts.

One parent run per sweep (tag ``stagedspec.role=parent``, keyed by ``stagedspec.sweep_id``
so a re-run of the same sweep reattaches to it) and one child run per job
(``stagedspec.role=child``, ``mlflow.parentRunId``, ``stagedspec.config_hash``).

Why it looks like this:
- The database, the experiment and the parent are created *before* jobs start (by
  ``TrackingCallback``, registered in conf/config.yaml), and only after every job's config
  passed ``validate_cfg``: parallel jobs racing to create a fresh SQLite database or the
  same experiment have lost runs. Jobs find the parent by
  an environment variable, or a file in the sweep directory on other machines.
- Everything goes through an ``MlflowClient`` with explicit run ids, never the global
  "active run": jobs of a sweep share a process with the basic launcher.
- Resume: a job whose config hash already has a FINISHED child is skipped. A job killed
  mid-way leaves a RUNNING (or FAILED) child; the re-run deletes it and starts afresh, so
  each job has exactly one FINISHED child and the active view holds no stale ones.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import traceback
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from analysis.names import PARENT_TAG, ROLE_TAG

from .identity import job_overrides_label, sweep_id

log = logging.getLogger(__name__)

HASH_TAG = "stagedspec.config_hash"
SWEEP_TAG = "stagedspec.sweep_id"
MAX_PARAM_LEN = 6000  # MLflow's limit on a param value
PARENT_ENV = "STAGEDSPEC_PARENT_RUN_ID"
PARENT_FILE = "mlflow_parent_run.json"
REPO_DIR = Path(__file__).resolve().parents[2]


def default_artifact_location(uri: str) -> str | None:
    """For ``sqlite:////abs/dir/x.db``: ``file:///abs/dir/mlartifacts`` (next to the
    database, not in whatever directory a job happens to start in). Else the store's own."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).resolve().parent / "mlartifacts").as_uri()
    return None


class Tracker:
    def __init__(self, uri: str, experiment_name: str, artifact_location: str | None = None) -> None:
        from mlflow import MlflowClient

        if uri.startswith("sqlite:///"):
            Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self.experiment_id = self._experiment(experiment_name, artifact_location or default_artifact_location(uri))

    def _experiment(self, name: str, artifact_location: str | None) -> str:
        from mlflow.exceptions import MlflowException

        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            try:
                return self.client.create_experiment(name, artifact_location=artifact_location)
            except MlflowException:  # another process created it first
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise
        if exp.lifecycle_stage == "deleted":
            self.client.restore_experiment(exp.experiment_id)
        return exp.experiment_id

    def _search(self, *filters: str) -> list[Any]:
        return list(self.client.search_runs([self.experiment_id], filter_string=" and ".join(filters), max_results=1000))

    def parent_run(self, sweep_id: str, name: str, tags: dict[str, str]) -> str:
        """The parent run of sweep ``sweep_id``: found again if it exists, else created."""
        runs = self._search(f"tags.`{ROLE_TAG}` = 'parent'", f"tags.`{SWEEP_TAG}` = '{sweep_id}'")
        if runs:
            run_id = runs[0].info.run_id
            log.info("reattaching to parent run %s of sweep %s", run_id, sweep_id)
            self.client.update_run(run_id, status="RUNNING")
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
        """A new child run. Earlier runs of this job that did not finish (killed, failed) are
        deleted (soft: ``mlflow gc`` or the UI can still see them), and with
        ``redo_finished`` the finished ones too, so one active run per job remains."""
        for old in self._search(f"tags.`{HASH_TAG}` = '{config_hash}'"):
            if old.info.status != "FINISHED" or redo_finished:
                log.info("deleting earlier run %s (%s) of this job; redoing it", old.info.run_id, old.info.status)
                self.client.delete_run(old.info.run_id)
        tags = {**tags, ROLE_TAG: "child", HASH_TAG: config_hash}
        if parent_run_id:
            tags[PARENT_TAG] = parent_run_id
        return self.client.create_run(self.experiment_id, run_name=name, tags=tags).info.run_id

    def log(
        self, run_id: str, params: dict[str, Any] | None = None, metrics: dict[str, float] | None = None,
        tags: dict[str, Any] | None = None,
    ) -> None:
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.utils.time import get_current_time_millis

        now = get_current_time_millis()
        p = [Param(k, _param_value(k, v)) for k, v in (params or {}).items()]
        m = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items() if v is not None and not math.isnan(float(v))]
        t = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        for i in range(0, max(len(p), len(m), len(t)), 100):  # MLflow caps a batch at 100 params/tags
            self.client.log_batch(run_id, metrics=m[i : i + 100], params=p[i : i + 100], tags=t[i : i + 100])

    def log_artifact(self, run_id: str, path: str | Path) -> None:
        self.client.log_artifact(run_id, str(path))

    def end(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)


def _param_value(key: str, value: Any) -> str:
    text = "None" if value is None else str(value)
    if len(text) > MAX_PARAM_LEN:
        log.warning("param %s is %d characters long; truncated to MLflow's %d", key, len(text), MAX_PARAM_LEN)
        text = text[: MAX_PARAM_LEN - 3] + "..."
    return text


def tracker_for(cfg: DictConfig) -> Tracker | None:
    """The tracker a config names (``tracking.uri``), or None when tracking is off."""
    tracking = cfg.get("tracking")
    uri = None if tracking is None else tracking.get("uri")
    if not uri:
        return None
    return Tracker(uri, cfg.experiment_name, tracking.get("artifact_location"))


class TrackingCallback(Callback):
    """Checks every job's config, then creates the MLflow database, experiment and the
    sweep's parent run before any job starts, and hands the parent's id to the jobs
    (environment variable, plus a file in the sweep directory for jobs on other
    machines). Registered in conf/config.yaml under ``hydra.callbacks``; ``validate:
    false`` (generate) skips the up-front check (the entry point checks its one job)."""

    def __init__(self, validate: bool = True) -> None:
        self.validate = validate
        self.tracker: Tracker | None = None
        self.parent_run_id: str | None = None

    def _start(self, config: DictConfig, multirun: bool) -> None:
        from .cli import CliError, validate_single, validate_sweep

        if not HydraConfig.initialized():  # `${hydra:...}` in tracking.uri needs it
            HydraConfig.instance().set_config(config)
        if self.validate:
            try:
                if multirun:
                    validate_sweep(config)
                else:
                    validate_single(config)
            except CliError as e:
                # Hydra turns a callback's exception into a warning and carries on, so stop
                # here: the message alone, the traceback too under HYDRA_FULL_ERROR=1.
                if os.environ.get("HYDRA_FULL_ERROR") == "1":
                    traceback.print_exception(e)
                raise SystemExit(str(e)) from None
        self.tracker = tracker_for(config)
        if self.tracker is None:
            return
        hc = config.hydra
        params = OmegaConf.to_container(hc.sweeper.params, resolve=False) if hc.sweeper.get("params") else {}
        overrides = list(hc.overrides.task)
        sid = sweep_id(config.experiment_name, overrides, params)
        name = job_overrides_label(overrides) or config.experiment_name
        tags = {"stagedspec.overrides": " ".join(overrides)[:5000], **git_tags()}
        self.parent_run_id = self.tracker.parent_run(sid, name, tags)
        os.environ[PARENT_ENV] = self.parent_run_id
        if multirun:
            sweep_dir = Path(hc.sweep.dir)
            sweep_dir.mkdir(parents=True, exist_ok=True)
            (sweep_dir / PARENT_FILE).write_text(json.dumps({"parent_run_id": self.parent_run_id, "sweep_id": sid}))

    def _end(self, status: str = "FINISHED") -> None:
        # A multirun whose jobs raised never gets here (Hydra re-raises first): its parent
        # stays RUNNING until a re-run of the sweep completes it.
        if self.tracker is not None and self.parent_run_id:
            self.tracker.end(self.parent_run_id, status)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._start(config, multirun=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._end()

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._start(config, multirun=False)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        job_return = kwargs.get("job_return")
        failed = job_return is not None and getattr(job_return.status, "name", "") == "FAILED"
        self._end("FAILED" if failed else "FINISHED")


def parent_run_id() -> str | None:
    """The sweep's parent run, as the callback handed it on (None outside a tracked sweep)."""
    if os.environ.get(PARENT_ENV):
        return os.environ[PARENT_ENV]
    if HydraConfig.initialized():
        f = Path(HydraConfig.get().sweep.dir) / PARENT_FILE
        if f.is_file():
            return json.loads(f.read_text())["parent_run_id"]
    return None


def git_tags() -> dict[str, str]:
    """The commit the code ran from, and whether tracked files differed from it."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_DIR, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_DIR, capture_output=True, text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"mlflow.source.git.commit": commit, "stagedspec.git_dirty": str(bool(dirty)).lower()}
