"""The Hydra callback that opens a sweep's MLflow parent run before its jobs start (and
checks every job of the sweep first), hands its id to the jobs (``parent_run_id``,
``swept``), and summarises the sweep on the parent when it ends. The MLflow writer it
uses is ``tracking.py``."""

from __future__ import annotations

import json
import logging
import os
import traceback
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from .cli import CliError, swept_keys, validate_single, validate_sweep
from .identity import sweep_id, sweep_name
from .tracking import PARENT_ENV, PARENT_FILE, SWEPT_ENV, Tracker, context_tags, tracker_for, ui_url

log = logging.getLogger(__name__)


class TrackingCallback(Callback):
    """Checks every job's config, then creates the MLflow database, experiment and the
    sweep's parent run before any job starts, and hands the parent's id to the jobs
    (environment variable, plus a file in the sweep directory for jobs on other
    machines). At the end, puts the sweep's headline on the parent. Registered in
    conf/config.yaml under ``hydra.callbacks``; generate.yaml checks its own key
    (``extra_keys: [prompt]``) and no prompt set (``with_data: false``)."""

    def __init__(self, validate: bool = True, extra_keys: Any = (), with_data: bool = True) -> None:
        self.validate = validate
        self.check = {"extra_keys": tuple(extra_keys), "with_data": with_data}
        self.tracker: Tracker | None = None
        self.parent_run_id: str | None = None

    def _start(self, config: DictConfig, multirun: bool) -> None:
        if not HydraConfig.initialized():  # `${hydra:...}` in tracking.uri needs it
            HydraConfig.instance().set_config(config)
        n_jobs, swept, plans = 1, [], None
        if self.validate:
            try:
                if multirun:
                    plans = validate_sweep(config, **self.check)
                    n_jobs = len(plans) if plans is not None else 0
                    swept = swept_keys(config)
                else:
                    plans = [([], validate_single(config, **self.check))]
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
        tags = {"stagedspec.overrides": " ".join(overrides)[:5000], **context_tags()}
        self.parent_run_id = self.tracker.parent_run(sid, sweep_name(config.experiment_name, swept, n_jobs), tags)
        prompt_sets = {(p.data_name, tuple(q.question_id for q in p.questions)) for _, p in plans or []}
        if len(prompt_sets) == 1 and plans[0][1].questions:  # every job on the same prompts: the sweep's dataset too
            plan = plans[0][1]
            self.tracker.log_prompt_set(self.parent_run_id, plan.questions, plan.data_name, str(plan.data_path))
        os.environ[PARENT_ENV] = self.parent_run_id
        os.environ[SWEPT_ENV] = json.dumps(swept)
        lines = [f"- {o}" for o in overrides] + [f"- {k}={v}" for k, v in params.items()]
        if multirun:
            sweep_dir = Path(hc.sweep.dir)
            sweep_dir.mkdir(parents=True, exist_ok=True)
            (sweep_dir / PARENT_FILE).write_text(
                json.dumps({"parent_run_id": self.parent_run_id, "sweep_id": sid, "swept": swept})
            )
            (sweep_dir / "overrides.yaml").write_text("\n".join(lines) + "\n" if lines else "[]\n")
            self.tracker.log_artifact(self.parent_run_id, sweep_dir / "overrides.yaml", "hydra")

    def _end(self, status: str = "FINISHED") -> None:
        # A multirun whose jobs raised never gets here (Hydra re-raises first): its parent
        # stays RUNNING until a re-run of the sweep completes it.
        if self.tracker is not None and self.parent_run_id:
            self.tracker.summarize_parent(self.parent_run_id)
            self.tracker.end(self.parent_run_id, status)
            log.info("MLflow: %s", ui_url(self.tracker))

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
    f = _parent_file()
    return json.loads(f.read_text())["parent_run_id"] if f is not None else None


def swept() -> list[str] | None:
    """The keys the sweep varies, as the callback handed them on (None: not known)."""
    if os.environ.get(SWEPT_ENV):
        return json.loads(os.environ[SWEPT_ENV])
    f = _parent_file()
    return json.loads(f.read_text()).get("swept") if f is not None else None


def _parent_file() -> Path | None:
    if HydraConfig.initialized():
        f = Path(HydraConfig.get().sweep.dir) / PARENT_FILE
        if f.is_file():
            return f
    return None
