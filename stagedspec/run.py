"""The experiment runner: ``python -m stagedspec.run [-m] [overrides]``.

The only module that knows Hydra configs, the decoding core and the tracker. One job:

1. validate the whole config, reading the questions (``config_utils.validate_cfg``):
   nothing is loaded before every cheap check has passed;
2. skip the job if MLflow already holds a FINISHED run with the same config hash;
3. load the models (once per process: a multirun's later jobs reuse them), build the
   draft hierarchy (this checks each drafter's tokenizer against the target's);
4. decode every prompt turn with the plain autoregressive baseline and with the
   configured method, ``batch_size`` prompts of one category at a time
   (``evaluation.decode_all``);
5. write ``outputs.jsonl`` and ``metrics.json`` in the Hydra run directory and log params,
   metrics, tags and artifacts to MLflow.

Examples::

    python -m stagedspec.run                                  # one job, conf/config.yaml
    python -m stagedspec.run -m experiment=default            # the default sweep
    python -m stagedspec.run -m levels.small.k=1,2,4,8 sampling=greedy,t07
    python -m stagedspec.run levels.ngram=null                # small > target only
    python -m stagedspec.run +drafter@levels.lookup=prompt_lookup levels.ngram=null
    python -m stagedspec.run -m hydra/launcher=parallel target.threads=1 levels.small.k=2,4
    python -m stagedspec.run tracking.uri=http://127.0.0.1:5000

Test hook: with ``STAGEDSPEC_FAIL_AFTER_JOBS=N`` set, every job whose Hydra job number
is >= N fails after its method's first batch: it raises (``STAGEDSPEC_FAIL_MODE=raise``,
the default; the run is marked FAILED) or kills the process on the spot
(``STAGEDSPEC_FAIL_MODE=exit``; the run stays RUNNING, like a job killed by a scheduler).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

import torch
from tqdm.contrib.logging import logging_redirect_tqdm

from . import config_utils, models
from .config_utils import ConfigError, JobPlan
from .decoding import SpeculativeDecoder
from .hierarchy import build_hierarchy
from .evaluation import decode_all, job_metrics
from .text import encode, eos_token_ids

log = logging.getLogger("stagedspec.run")

PARENT_ENV = "STAGEDSPEC_PARENT_RUN_ID"
PARENT_FILE = "mlflow_parent_run.json"
FAIL_AFTER_ENV = "STAGEDSPEC_FAIL_AFTER_JOBS"
FAIL_MODE_ENV = "STAGEDSPEC_FAIL_MODE"
REPO_DIR = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------- tracking glue
def _tracking_uri(cfg: DictConfig) -> str | None:
    tracking = cfg.get("tracking")
    return None if tracking is None else tracking.get("uri")


def _tracker(cfg: DictConfig):
    uri = _tracking_uri(cfg)
    if not uri:
        return None
    from .tracking import Tracker

    return Tracker(uri, cfg.experiment_name, cfg.tracking.get("artifact_location"))


class TrackingCallback(Callback):
    """Creates the MLflow database, experiment and the sweep's parent run before any job
    starts, and hands the parent's id to the jobs (environment variable, plus a file in
    the sweep directory for jobs on other machines). Registered in conf/config.yaml under
    ``hydra.callbacks``."""

    def __init__(self) -> None:
        self.tracker = None
        self.parent_run_id: str | None = None

    def _start(self, config: DictConfig, multirun: bool) -> None:
        if not HydraConfig.initialized():  # `${hydra:...}` in tracking.uri needs it
            HydraConfig.instance().set_config(config)
        self.tracker = _tracker(config)
        if self.tracker is None:
            return
        hc = config.hydra
        params = OmegaConf.to_container(hc.sweeper.params, resolve=False) if hc.sweeper.get("params") else {}
        overrides = list(hc.overrides.task)
        sid = config_utils.sweep_id(config.experiment_name, overrides, params)
        name = config_utils.job_overrides_label(overrides) or config.experiment_name
        tags = {"stagedspec.overrides": " ".join(overrides)[:5000], **_git_tags()}
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


def _parent_run_id() -> str | None:
    if os.environ.get(PARENT_ENV):
        return os.environ[PARENT_ENV]
    if HydraConfig.initialized():
        f = Path(HydraConfig.get().sweep.dir) / PARENT_FILE
        if f.is_file():
            return json.loads(f.read_text())["parent_run_id"]
    return None


def _git_tags() -> dict[str, str]:
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


def _maybe_fail(job_num: int) -> None:
    """The test hook described in the module docstring."""
    after = os.environ.get(FAIL_AFTER_ENV)
    if after is None or job_num < int(after):
        return
    if os.environ.get(FAIL_MODE_ENV, "raise") == "exit":
        log.error("test hook %s=%s: killing the process in job %d", FAIL_AFTER_ENV, after, job_num)
        logging.shutdown()
        os._exit(137)
    raise RuntimeError(f"test hook {FAIL_AFTER_ENV}={after}: job {job_num} fails mid-way")


# ---------------------------------------------------------------------------- the job
def execute(cfg: DictConfig, out_dir: str | Path | None = None) -> dict[str, float] | None:
    """Run one job; returns its metrics, or None when it was skipped as already done."""
    plan = config_utils.validate_cfg(cfg)  # before anything is loaded
    chash = config_utils.config_hash(cfg)
    hc = HydraConfig.get() if HydraConfig.initialized() else None
    out_dir = Path(out_dir or (hc.runtime.output_dir if hc else Path.cwd()))
    out_dir.mkdir(parents=True, exist_ok=True)
    job_num = int(hc.job.num) if hc is not None and hc.job.get("num") is not None else 0
    tracker = _tracker(cfg)
    resume = cfg.get("resume", True)
    if tracker is not None and resume:
        done = tracker.finished_child(chash)
        if done is not None:
            log.info("skipping, already done: run %s has config hash %s", done, chash[:12])
            return None
    method = plan.method
    tags = {
        "stagedspec.method": method, "stagedspec.device": str(cfg.device), "stagedspec.experiment": cfg.experiment_name,
        **_git_tags(),
    }
    name = config_utils.job_overrides_label(hc.overrides.task) if hc is not None else ""
    run_id = None
    if tracker is not None:
        run_id = tracker.start_child(_parent_run_id(), chash, name or method, tags, redo_finished=not resume)
    try:
        metrics = _decode_job(cfg, plan, out_dir, job_num, tracker, run_id)
    except BaseException:
        if tracker is not None:
            tracker.end(run_id, "FAILED")
        raise
    if tracker is not None:
        tracker.end(run_id, "FINISHED")
    return metrics


def _decode_job(
    cfg: DictConfig, plan: JobPlan, out_dir: Path, job_num: int, tracker: Any, run_id: str | None
) -> dict[str, float]:
    t0 = time.perf_counter()
    target = models.load_cached(plan.target)
    drafter = build_hierarchy(plan.levels, target, models.load_cached)  # checks tokenizers, naming the level
    if tracker is not None:
        draft_models = {lv.name: _level_model_name(lv, target) for lv in plan.levels}
        tracker.log(run_id, tags={"stagedspec.target_model": target.name, "stagedspec.draft_models": json.dumps(draft_models)})
    load_s = time.perf_counter() - t0
    eos = eos_token_ids(target)
    method_dec = SpeculativeDecoder(target.model, drafter, plan.sampling, eos, context_length=target.context_length)
    ar_dec = SpeculativeDecoder(target.model, None, plan.sampling, eos, context_length=target.context_length)
    depth = max((lv.max_depth for lv in method_dec.levels), default=0)
    max_prompt = target.context_length - plan.max_new_tokens - depth
    if max_prompt < 1:
        raise ConfigError(
            f"max_new_tokens={plan.max_new_tokens} plus draft depth {depth} leaves no room for a prompt in "
            f"{target.name}'s context of {target.context_length} tokens"
        )
    if cfg.get("warmup", True):  # first forwards allocate; keep that out of either method's time
        first = encode(target, plan.questions[0].turns[0], [])[-min(32, max_prompt) :]
        for dec in (method_dec, ar_dec):
            dec.generate([first], min(4, plan.max_new_tokens))

    with logging_redirect_tqdm():
        torch.manual_seed(cfg.seed)
        run = decode_all(method_dec, plan.method, target, plan.questions, batch_size=plan.batch_size,
                         max_new_tokens=plan.max_new_tokens, max_prompt=max_prompt,
                         after_batch=lambda: _maybe_fail(job_num))
        ar = None
        if cfg.get("baseline", True) and plan.levels:
            torch.manual_seed(cfg.seed)
            ar = decode_all(ar_dec, "target", target, plan.questions, batch_size=plan.batch_size,
                            max_new_tokens=plan.max_new_tokens, max_prompt=max_prompt)
        elif cfg.get("baseline", True):
            ar = run  # the method *is* the baseline: speedup 1 by definition

    metrics = job_metrics(run, ar, plan.sampling.greedy)
    metrics["model_load_s"] = load_s
    with open(out_dir / "outputs.jsonl", "w", encoding="utf-8") as f:
        for rec in run.records + (ar.records if ar is not None and ar is not run else []):
            f.write(json.dumps(rec) + "\n")
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=1, sort_keys=True))
    (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(_task_cfg(cfg), resolve=True))
    log.info(
        "%s: %.2f tok/s%s, %.2f tokens/call, acceptance %.3f over %d prompts -> %s", plan.method,
        metrics["tokens_per_s"], f" (AR {metrics['ar_tokens_per_s']:.2f}, speedup {metrics['speedup']:.3f})" if ar else "",
        metrics["mean_accepted_tokens_per_call"], metrics.get("acceptance_rate", float("nan")), len(run.records), out_dir,
    )
    if tracker is not None:
        params = config_utils.flat_params(_task_cfg(cfg))
        params.update({
            "method": plan.method, "draft_k": plan.draft_k, "temperature": plan.sampling.temperature,
            "batch_size": plan.batch_size, "tree": plan.tree, "n_levels": len(plan.levels),
            "data.resolved_path": str(plan.data_path), "n_questions": len(plan.questions),
        })
        tracker.log(run_id, params=params, metrics=metrics)
        for fname in ("config.yaml", "outputs.jsonl", "metrics.json"):
            tracker.log_artifact(run_id, out_dir / fname)
    return metrics


def _level_model_name(level: Any, target: models.LoadedModel) -> str:
    spec = level.spec() if hasattr(level, "spec") else None
    if spec is None:
        return type(level).__name__
    if spec.source == "truncated":
        return f"{target.name}-first{spec.layers}"  # truncated_copy's name
    return models.load_cached(spec).name  # already loaded by build_hierarchy


def _task_cfg(cfg: DictConfig) -> DictConfig:
    """The job's config without the ``hydra`` node (present when composed with it)."""
    if "hydra" not in cfg:
        return cfg
    return OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict[str, float] | None:
    return execute(cfg)


if __name__ == "__main__":
    main()
