"""The experiment runner: ``python -m stagedspec.run [-m] [overrides]``.

Where a Hydra config, the decoding library and the tracker meet. One job:

1. translate the whole config into a checked ``JobPlan``, reading the questions
   (``plan.validate_cfg``): nothing is loaded before every cheap check has passed, and
   below ``execute`` only the plan travels;
2. skip the job if MLflow already holds a FINISHED run with the same config hash;
3. assemble the job (``evaluation/job.py``): load the models (once per process: a
   multirun's later jobs reuse them), build the draft hierarchy (this checks each drafter's
   tokenizer against the target's), choose the kernel plan, make the method's and the
   baseline's decoders, resolve ``tree=auto`` (calibrate on prompts that are not
   evaluated, or read the cache) and warm up; log the chosen tree, its source and
   prediction; decode a few prompts the job does not evaluate (held-out questions of its
   set, or the training templates) with the method and the baseline for the out-of-sample
   ``predicted_speedup`` (``evaluation/prediction.py``); all before anything is timed;
4. decode every prompt turn with the plain autoregressive baseline and with the
   configured method, ``batch_size`` prompts of one category at a time
   (``evaluation.decode_paired``: the two interleaved per batch, ``repeats`` times);
5. write ``outputs.jsonl``, ``metrics.json``, ``config.yaml`` and ``view.html`` (a few
   answers, each token coloured by the level that proposed it: ``view.py``) in the Hydra
   run directory and log params, metrics, tags and artifacts to MLflow.

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
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tqdm.contrib.logging import logging_redirect_tqdm

from stagedspec.evaluation.divergence import divergence_metrics, divergences
from stagedspec.evaluation.job import Job, NoRoomForPrompt, assemble_job
from stagedspec.evaluation.paired import decode_paired, job_metrics
from stagedspec.evaluation.prediction import calibration_ids, predict
from stagedspec.models.chat_text import ids_to_text
from stagedspec.models.model_loading import LoadedModel
from .cli import entry_errors
from .identity import config_hash, job_params, run_name
from .plan import CONF_DIR, ConfigError, JobPlan, validate_cfg
from .sweep_callback import parent_run_id, swept
from .tracking import NoTracker, Tracker, tracker_for
from .tracking_text import child_note
from .view import job_page

log = logging.getLogger(__name__)

FAIL_AFTER_ENV = "STAGEDSPEC_FAIL_AFTER_JOBS"
FAIL_MODE_ENV = "STAGEDSPEC_FAIL_MODE"
ARTIFACTS = ("config.yaml", "outputs.jsonl", "metrics.json", "view.html")


def execute(cfg: DictConfig, out_dir: str | Path | None = None) -> dict[str, float] | None:
    """Run one job; returns its metrics, or None when it was skipped as already done."""
    plan = validate_cfg(cfg)  # before anything is loaded
    chash = config_hash(cfg)
    hc = HydraConfig.get() if HydraConfig.initialized() else None
    out_dir = Path(out_dir or (hc.runtime.output_dir if hc else Path.cwd()))
    out_dir.mkdir(parents=True, exist_ok=True)
    job_num = int(hc.job.num) if hc is not None and hc.job.get("num") is not None else 0
    tracker = tracker_for(cfg) or NoTracker()
    if plan.resume:
        done = tracker.finished_child(chash)
        if done is not None:
            log.info("skipping, already done: run %s has config hash %s", done, chash[:12])
            return None
    # what the job is written down as: the resolved config without Hydra's node
    config_yaml = OmegaConf.to_yaml(_task_cfg(cfg), resolve=True)
    params = job_params(cfg, plan)
    tags = {
        "stagedspec.method": plan.method,
        "stagedspec.device": plan.device,
        "stagedspec.experiment": plan.experiment_name,
        "stagedspec.data": plan.data_name,
    }
    top = plan.levels[-1].name if plan.levels else None
    name = run_name(plan.run_name, hc.overrides.task if hc is not None else [], swept(), top)
    run_id = tracker.start_child(parent_run_id(), chash, name, tags, redo_finished=not plan.resume)
    try:
        tracker.log_prompt_set(run_id, plan.questions, plan.data_name, str(plan.data_path) if plan.data_path else None)
        metrics = _run_job(plan, out_dir, job_num, config_yaml, params, tracker, run_id, name)
    except BaseException:
        tracker.end(run_id, "FAILED")
        raise
    tracker.end(run_id, "FINISHED")
    return metrics


def _run_job(
    plan: JobPlan,
    out_dir: Path,
    job_num: int,
    config_yaml: str,
    params: dict[str, Any],
    tracker: Tracker | NoTracker,
    run_id: str | None,
    name: str = "",
) -> dict[str, float]:
    """The job's steps: assemble it (load, calibrate, resolve tree=auto, warm up), predict,
    decode method and baseline paired, measure, write the files and log the run."""
    job = _assemble(plan)
    _log_assembly(plan, job, out_dir, tracker, run_id)
    prediction = _predict(plan, job, tracker, run_id)
    run, ar = _decode(plan, job, job_num)
    compared = ar is not None and ar is not run  # plain decoding ran beside the method
    plain = ar.records if compared else []
    metrics = _measure(plan, job, run, ar, plain, compared, prediction)
    _write(out_dir, run.records + plain, metrics, config_yaml)
    _write_view(plan, job.target, run.records, out_dir)
    _log_summary(plan, metrics, len(run.records), ar is not None, out_dir)
    _log_results(plan, out_dir, params, metrics, run.records, plain, tracker, run_id, name, job.tree_choice is not None)
    return metrics


def _decode(plan: JobPlan, job: Job, job_num: int):
    """The method and its baseline, interleaved batch by batch, ``repeats`` times each."""
    with logging_redirect_tqdm():
        run, ar = decode_paired(
            job.method,
            job.baseline,
            job.target,
            plan.questions,
            batch_size=plan.batch_size,
            max_new_tokens=plan.max_new_tokens,
            max_prompt=job.max_prompt,
            repeats=plan.repeats,
            seed=plan.seed,
            after_batch=lambda: _maybe_fail(job_num),
        )
    if plan.baseline and not plan.levels:
        ar = run  # the method *is* the baseline: speedup 1 by definition
    return run, ar


def _measure(plan: JobPlan, job: Job, run, ar, plain: list[dict], compared: bool, prediction) -> dict[str, float]:
    """The job's metrics; greedy beside plain decoding (``compared``; ``plain`` its records)
    also where and why the outputs left it."""
    metrics = job_metrics(run, ar, plan.sampling.drafter_invariant, prediction)
    if plan.sampling.greedy and compared:
        found = divergences(job.target.model, run.records, plain)
        for rec, d in zip(run.records, found):
            rec["divergence"] = d
        metrics |= divergence_metrics(found)
    metrics["model_load_s"] = job.load_s
    if job.tree_choice is not None:  # the tree's prediction beside what the run measured (tokens_per_call)
        metrics.update(job.tree_choice.metrics())
    return metrics


def _log_summary(plan: JobPlan, metrics: dict[str, float], n: int, compared: bool, out_dir: Path) -> None:
    log.info(
        "%s: %.2f tok/s%s, %.2f tokens/call, acceptance %.3f over %d prompts -> %s",
        plan.method,
        metrics["tokens_per_s"],
        f" (AR {metrics['ar_tokens_per_s']:.2f}, speedup {metrics['speedup']:.3f})" if compared else "",
        metrics["mean_accepted_tokens_per_call"],
        metrics.get("acceptance_rate", float("nan")),
        n,
        out_dir,
    )


def _write_view(plan: JobPlan, target: LoadedModel, records: list[dict], out_dir: Path) -> None:
    """``view.html``: which level wrote which token of each answer (``view.job_page``)."""
    (out_dir / "view.html").write_text(
        job_page(
            plan.method,
            [lv.name for lv in plan.levels],
            records,
            lambda ids: ids_to_text(target, ids),
            {q.question_id: q.turns for q in plan.questions},
        ),
        encoding="utf-8",
    )


def _assemble(plan: JobPlan) -> Job:
    """``evaluation.job.assemble_job``, its room check reported as a config error."""
    try:
        return assemble_job(plan, warmup_text=plan.questions[0].turns[0])
    except NoRoomForPrompt as e:
        raise ConfigError(str(e)) from e


def _log_assembly(plan: JobPlan, job: Job, out_dir: Path, tracker: Tracker | NoTracker, run_id: str | None) -> None:
    """The models, the kernel plan and tree=auto's choice (also written to tree_auto.json)."""
    tracker.log(
        run_id,
        tags={"stagedspec.target_model": job.target.name, "stagedspec.draft_models": json.dumps(job.draft_models)},
    )
    tracker.log(run_id, tags={"stagedspec.kernel_plan": job.kernels.describe()})
    choice = job.tree_choice
    if choice is not None:
        (out_dir / "tree_auto.json").write_text(json.dumps(choice.artifact(), indent=1, default=str))
        tracker.log(
            run_id,
            params=choice.params(),
            tags={"stagedspec.tree_auto": f"{len(choice.paths)} nodes, source {choice.calibration.key.get('source')}"},
        )


def _predict(plan: JobPlan, job: Job, tracker: Tracker | NoTracker, run_id: str | None) -> dict[str, float]:
    """The out-of-sample ``predicted_speedup``, from prompts the job does not evaluate,
    decoded before any timed batch ({} without levels, baseline or prediction prompts)."""
    if not (plan.prediction_prompts and job.baseline is not None):
        return {}
    n = -(-max(plan.prediction_prompts, plan.batch_size) // plan.batch_size) * plan.batch_size
    tokens = min(plan.prediction_tokens, plan.max_new_tokens)  # more than the job decodes samples nothing it sees
    ids, where = calibration_ids(
        job.target,
        plan.prediction_source,
        n,
        plan.heldout_questions,
        job.max_prompt,
        tokens=tokens,
        data_name=plan.data_name,
    )
    prediction = predict(
        job.method,
        job.baseline,
        ids,
        tokens=tokens,
        batch_size=plan.batch_size,
        max_new_tokens=plan.max_new_tokens,
        seed=plan.seed,
    )
    if prediction:
        tracker.log(run_id, params={"prediction.calibration": where})
        log.info(
            "predicted before timing: %.2fx, %.2f tokens/call (%s)",
            prediction["predicted_speedup"],
            prediction["predicted_tokens_per_call"],
            where,
        )
    return prediction


def _log_results(
    plan: JobPlan,
    out_dir: Path,
    params: dict[str, Any],
    metrics: dict[str, float],
    records: list[dict],
    plain: list[dict],
    tracker: Tracker | NoTracker,
    run_id: str | None,
    name: str,
    tree_auto: bool,
) -> None:
    """Params, metrics, the description, the outputs table and the artifacts, to the run."""
    tracker.log(run_id, params=params, metrics=metrics)
    tracker.describe(run_id, child_note(name or plan.run_name, metrics, _data_text(plan), plan.max_new_tokens))
    tracker.log_table(run_id, outputs_table(plan, records, plain), "outputs_table.json")
    for fname in ARTIFACTS:
        tracker.log_artifact(run_id, out_dir / fname)
    if tree_auto:
        tracker.log_artifact(run_id, out_dir / "tree_auto.json")
    overrides = out_dir / ".hydra" / "overrides.yaml"  # the job's command-line overrides, as Hydra wrote them
    if overrides.is_file():
        tracker.log_artifact(run_id, overrides, "hydra")


def _data_text(plan: JobPlan) -> str:
    """ "mt_bench (8 questions, 8 prompt turns)"."""
    turns = sum(len(q.turns) for q in plan.questions)
    return f"{plan.data_name} ({len(plan.questions)} questions, {turns} prompt turns)"


def outputs_table(plan: JobPlan, records: list[dict], ar_records: list[dict]) -> dict[str, list]:
    """One row per prompt turn: the question, the method's answer and what it cost, and
    plain decoding's answer beside it (``log_table``: a table in the MLflow UI)."""
    questions = {q.question_id: q for q in plan.questions}
    ar = {(r["question_id"], r["turn"]): r for r in ar_records}
    cols: dict[str, list] = {
        k: []
        for k in (
            "question_id",
            "category",
            "turn",
            "question",
            "answer",
            "new_tokens",
            "target_calls",
            "tokens_per_call",
            "finished",
            "plain_answer",
            "same_as_plain",
            "first_divergence",
            "divergence_gap_steps",
        )
    }
    for r in records:
        calls = len(r["rounds"])
        other = ar.get((r["question_id"], r["turn"]))
        cols["question_id"].append(r["question_id"])
        cols["category"].append(r["category"])
        cols["turn"].append(r["turn"])
        cols["question"].append(questions[r["question_id"]].turns[r["turn"] - 1])
        cols["answer"].append(r["text"])
        cols["new_tokens"].append(len(r["output_ids"]))
        cols["target_calls"].append(calls)
        cols["tokens_per_call"].append(round(len(r["output_ids"]) / calls, 3) if calls else None)
        cols["finished"].append(r["finished_reason"])
        cols["plain_answer"].append(other["text"] if other else None)
        cols["same_as_plain"].append(other["output_ids"] == r["output_ids"] if other else None)
        d = r.get("divergence")  # greedy jobs: where the output left plain decoding's
        cols["first_divergence"].append(d["position"] if d else None)
        cols["divergence_gap_steps"].append(round(d["gap_steps"], 2) if d else None)
    return cols


def _write(out_dir: Path, records: list[dict], metrics: dict[str, float], config_yaml: str) -> None:
    """The job's files in its run directory (the tracker gets copies as artifacts)."""
    with open(out_dir / "outputs.jsonl", "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=1, sort_keys=True))
    (out_dir / "config.yaml").write_text(config_yaml)


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


def _task_cfg(cfg: DictConfig) -> DictConfig:
    """The job's config without the ``hydra`` node (present when composed with it)."""
    if "hydra" not in cfg:
        return cfg
    return OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])


# An absolute path: with a relative one, Hydra would look for a package `conf` (it reads
# paths relative to a module that is not __main__ as packages; here the `python -m
# stagedspec.run` shim is __main__), and conf/ is no package.
@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict[str, float] | None:
    with entry_errors():  # one line on the console (a file holds any other error's traceback);
        # HYDRA_FULL_ERROR=1 prints the traceback
        return execute(cfg)
