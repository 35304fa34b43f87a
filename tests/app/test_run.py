"""End-to-end sweeps with the tiny preset, through the real CLI and the real engine, read
back from MLflow: params and metrics, resume, a killed job redone, parallel jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from mlflow import MlflowClient

REPO = Path(__file__).resolve().parents[2]
SWEEP = ["experiment=tiny", "levels.small.k=1,2", "sampling=greedy,t07"]


@pytest.fixture
def questions(tmp_path) -> Path:
    """Two questions: one with two turns (the second turn sees the first answer), one with one."""
    p = tmp_path / "q.jsonl"
    rows = [
        {"question_id": 7, "category": "writing", "turns": ["Write a haiku about the sea.", "Now make it rhyme."]},
        {"question_id": 9, "category": "qa", "turns": ["What is the capital of France?"]},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def sweep(tmp_path: Path, questions: Path, *extra: str, env: dict | None = None, check: bool = True):
    cmd = [
        sys.executable,
        "-m",
        "stagedspec.run",
        "-m",
        *SWEEP,
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"hydra.sweep.dir={tmp_path}/multirun",
        "data=spec_bench",
        f"data.path={questions}",
        *extra,
    ]
    full_env = {**os.environ, "TQDM_DISABLE": "1", "HYDRA_FULL_ERROR": "1", **(env or {})}
    for k in ("STAGEDSPEC_FAIL_AFTER_JOBS", "STAGEDSPEC_FAIL_MODE", "STAGEDSPEC_PARENT_RUN_ID"):
        if k not in (env or {}):
            full_env.pop(k, None)
    p = subprocess.run(cmd, cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
    return p


def runs(tmp_path: Path, role: str = "child", status: str | None = None) -> list:
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("tiny")
    out = client.search_runs([exp.experiment_id], filter_string=f"tags.`stagedspec.role` = '{role}'")
    return [r for r in out if status is None or r.info.status == status]


def test_sweep_logs_every_job_and_resumes(tmp_path, questions):
    sweep(tmp_path, questions)
    children = runs(tmp_path)
    assert len(children) == 4 and all(r.info.status == "FINISHED" for r in children)
    (parent,) = runs(tmp_path, role="parent")
    assert parent.info.status == "FINISHED"
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent.info.run_id}
    # short distinct names; the parent's names what the sweep varies
    assert sorted(r.info.run_name for r in children) == [
        f"ngram>small>target k={k} T={t}" for k in (1, 2) for t in ("0", "0.7")
    ]
    assert parent.info.run_name == "tiny: levels.small.k x sampling, 4 jobs"
    assert Counter(r.data.params["draft_k"] for r in children) == {"1": 2, "2": 2}
    assert Counter(r.data.params["temperature"] for r in children) == {"0.0": 2, "0.7": 2}
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    for r in children:
        p, m, t = r.data.params, r.data.metrics, r.data.tags
        assert p["method"] == t["stagedspec.method"] == "ngram>small>target"
        assert p["n_levels"] == "2" and p["tree"] == "chain" and p["batch_size"] == "1"
        assert p["levels.small.model.layers"] == "1" and p["levels.ngram.k"] == "2" and p["data.name"] == "spec_bench"
        # each setting once, no class paths, no copies: draft_k is the top level's k, temperature sampling's
        assert not [k for k, v in p.items() if "_target_" in k or "stagedspec." in v or v == "None"]
        assert not {
            "levels.small.k",
            "sampling.temperature",
            "sampling.seed",
            "target.device",
            "tracking.uri",
            "experiment_name",
            "resume",
            "levels.small.model.dtype",
            "levels.ngram.enabled",
        } & set(p)
        assert 0.0 <= m["acceptance_rate"] <= 1.0
        assert m["mean_accepted_tokens_per_call"] >= 1.0
        assert m["speedup"] > 0 and m["ar_tokens_per_s"] > 0 and m["tokens_per_s"] > 0
        assert m["emitted"] == 3 * 12  # 3 prompt turns x max_new_tokens (tiny models have no EOS)
        for cat in ("writing", "qa"):
            assert m[f"speedup/{cat}"] > 0 and m[f"tokens_per_s/{cat}"] > 0
            assert m[f"mean_accepted_tokens_per_call/{cat}"] >= 1.0
        if p["temperature"] == "0.0":
            assert m["ar_match_rate"] == 1.0, "greedy speculation must reproduce greedy decoding"
            assert m["ar_divergences"] == 0.0 and "ar_first_divergence_min" not in m
        assert len(t["stagedspec.config_hash"]) == 64 and t["stagedspec.target_model"].startswith("tiny")
        assert {"config.yaml", "outputs.jsonl", "metrics.json", "outputs_table.json"} <= {
            a.path for a in client.list_artifacts(r.info.run_id)
        }
        assert [a.path for a in client.list_artifacts(r.info.run_id, "hydra")] == ["hydra/overrides.yaml"]
        # headline first; per-position acceptance one metric, step = position
        # (3 prompt turns per job: the speedup's interval is there)
        assert list(m)[:6] == [
            "speedup",
            "speedup_ci_low",
            "speedup_ci_high",
            "mean_accepted_tokens_per_call",
            "acceptance_rate",
            "wasted_target_fraction",
        ]
        assert not [k for k in m if k.startswith("position_acceptance/")]
        steps = client.get_metric_history(r.info.run_id, "position_acceptance")
        assert sorted(x.step for x in steps) == list(range(1, int(p["draft_k"]) + 1))
        assert t["mlflow.note.content"].startswith(f"**{r.info.run_name}** on spec_bench (2 questions, 3 prompt turns)")
        assert "**Speedup" in t["mlflow.note.content"]
        # run context from MLflow's resolvers, handed down from the parent
        assert t["mlflow.user"] and t["mlflow.source.name"].endswith("run.py") and t["mlflow.source.type"] == "LOCAL"
        (ds,) = r.inputs.dataset_inputs
        assert ds.dataset.name == "spec_bench" and str(questions) in ds.dataset.source
        assert [tag.value for tag in ds.tags] == ["eval"]
        table = json.loads(
            Path(client.download_artifacts(r.info.run_id, "outputs_table.json", str(tmp_path))).read_text()
        )
        assert table["columns"][:5] == ["question_id", "category", "turn", "question", "answer"]
        assert len(table["data"]) == 3 and {row[3] for row in table["data"]} >= {"Now make it rhyme."}
    # the parent carries the best job's headline and a table of all jobs
    best = max(children, key=lambda r: r.data.metrics["speedup"])
    assert parent.data.metrics["speedup"] == best.data.metrics["speedup"]
    assert parent.data.tags["stagedspec.best_run"] == best.info.run_id
    note = parent.data.tags["mlflow.note.content"]
    assert f"Best: **{best.info.run_name}**" in note and note.count("| ngram>small>target k=") == 4
    assert [a.path for a in client.list_artifacts(parent.info.run_id, "hydra")] == ["hydra/overrides.yaml"]
    exp = client.get_experiment_by_name("tiny")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    view = json.loads(exp.tags["mlflow.sharedViewState.stagedspec-headline"])
    assert view["orderByKey"] == "metrics.`speedup`" and "metrics.`acceptance_rate`" in view["selectedColumns"]
    assert "stagedspec-headline" in exp.tags["mlflow.note.content"]
    assert len({r.data.tags["stagedspec.config_hash"] for r in children}) == 4

    # outputs.jsonl: one record per prompt turn and method; turn 2 carries turn 1 as history
    recs = [json.loads(line) for line in (tmp_path / "multirun" / "0" / "outputs.jsonl").read_text().splitlines()]
    assert Counter((r["method"], r["question_id"], r["turn"]) for r in recs) == {
        (m, q, t): 1 for m in ("ngram>small>target", "target") for q, t in ((7, 1), (7, 2), (9, 1))
    }
    by = {(r["method"], r["question_id"], r["turn"]): r for r in recs}
    first, second = by[("target", 7, 1)], by[("target", 7, 2)]
    assert second["prompt_ids"][: len(first["prompt_ids"])] == first["prompt_ids"]
    assert len(second["prompt_ids"]) > len(first["prompt_ids"]) + len("Now make it rhyme.")
    assert len(first["output_ids"]) == len(first["provenance"]) == 12 and first["rounds"]
    metrics = json.loads((tmp_path / "multirun" / "0" / "metrics.json").read_text())
    assert metrics["speedup"] > 0

    # the same sweep again: every job is found done and skipped
    p = sweep(tmp_path, questions)
    assert (p.stdout + p.stderr).count("skipping, already done") == 4
    assert len(runs(tmp_path)) == 4 and len(runs(tmp_path, status="FINISHED")) == 4
    assert len(runs(tmp_path, role="parent")) == 1


@pytest.mark.parametrize("mode", ["exit", "raise"])
def test_killed_or_failed_job_is_redone(tmp_path, questions, mode):
    p = sweep(tmp_path, questions, env={"STAGEDSPEC_FAIL_AFTER_JOBS": "2", "STAGEDSPEC_FAIL_MODE": mode}, check=False)
    assert p.returncode != 0
    assert len(runs(tmp_path, status="FINISHED")) == 2
    if mode == "exit":  # killed: jobs 0, 1 done, job 2 left RUNNING, job 3 never started
        assert [r.info.status for r in runs(tmp_path) if r.info.status != "FINISHED"] == ["RUNNING"]
    else:  # jobs 2 and 3 raised and were marked FAILED
        assert sorted(r.info.status for r in runs(tmp_path)) == ["FAILED", "FAILED", "FINISHED", "FINISHED"]
    p = sweep(tmp_path, questions)
    assert (p.stdout + p.stderr).count("skipping, already done") == 2
    children = runs(tmp_path)
    assert len(children) == 4 and all(r.info.status == "FINISHED" for r in children)
    assert len({r.data.tags["stagedspec.config_hash"] for r in children}) == 4  # one FINISHED run per job
    (parent,) = runs(tmp_path, role="parent")
    assert parent.info.status == "FINISHED"
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent.info.run_id}


def test_parallel_jobs_on_a_fresh_database_lose_no_runs(tmp_path, questions):
    sweep(tmp_path, questions, "hydra/launcher=joblib", "hydra.launcher.n_jobs=4", "target.threads=1")
    children = runs(tmp_path)
    assert len(children) == 4 and all(r.info.status == "FINISHED" for r in children)
    (parent,) = runs(tmp_path, role="parent")
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent.info.run_id}
    assert all("speedup" in r.data.metrics for r in children)
    # the workers name their runs after what the sweep varies, and get the parent's context
    assert len({r.info.run_name for r in children}) == 4
    assert {r.data.tags["mlflow.source.name"] for r in children} == {parent.data.tags["mlflow.source.name"]}


BAD_CLI = [
    # (arguments, what the one-line message must say)
    (
        ["+level.ngram.k=2"],
        "error: unknown config key 'level.ngram.k': 'level' is not a key at the top level; "
        "did you mean 'levels.ngram.k'?",
    ),
    (["target=smollm2", "target.path=/nope"], "error: target.path='/nope' is ignored by source 'embedded'"),
    (["-m", "levels.small.k=2,0"], "error: job 1 of 2 (levels.small.k=0): levels.small:"),
    (["data=mt_bench", "data.path=/x.jsonl"], "error: data.path='/x.jsonl' is ignored by data=mt_bench"),
]


@pytest.mark.parametrize("args, message", BAD_CLI, ids=[" ".join(a) for a, _ in BAD_CLI])
def test_bad_command_line_is_one_message_and_touches_nothing(tmp_path, args, message):
    """Refused before the MLflow database, a parent run or a model exist; no traceback
    unless HYDRA_FULL_ERROR=1."""
    cmd = [
        sys.executable,
        "-m",
        "stagedspec.run",
        *args,
        "experiment=tiny",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"hydra.sweep.dir={tmp_path}/multirun",
        f"hydra.run.dir={tmp_path}/run",
    ]
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert message in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "mlflow.db").exists()
    if args[0] != "+level.ngram.k=2":
        return
    full = subprocess.run(
        cmd, cwd=tmp_path, env={**env, "HYDRA_FULL_ERROR": "1"}, capture_output=True, text=True, timeout=120
    )
    assert full.returncode != 0 and "Traceback" in full.stderr and "ConfigError" in full.stderr


def test_in_process_job_resume_and_redo(tmp_path, questions):
    """``execute`` without the CLI (as from a notebook): skip when done, redo with resume=false."""
    from hydra import compose, initialize_config_dir

    from stagedspec.app import run_entry as run
    from stagedspec.app.plan import CONF_DIR

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):

        def cfg(*extra):
            return compose(
                "config",
                overrides=[
                    "experiment=tiny",
                    "data=spec_bench",
                    f"data.path={questions}",
                    f"tracking.uri={uri}",
                    "max_new_tokens=4",
                    *extra,
                ],
            )

        first = run.execute(cfg(), out_dir=tmp_path / "a")
        assert first is not None and first["emitted"] == 3 * 4
        assert run.execute(cfg(), out_dir=tmp_path / "b") is None  # done: skipped
        assert run.execute(cfg("resume=false"), out_dir=tmp_path / "c") is not None
    finished = runs(tmp_path, status="FINISHED")
    assert len(finished) == 1 and len(runs(tmp_path)) == 1  # the first run was replaced, not duplicated
    assert (tmp_path / "c" / "outputs.jsonl").is_file() and not (tmp_path / "b" / "outputs.jsonl").exists()


AUTO = [
    "tree=auto",
    "tree.shape.auto.max_nodes=4",
    "tree.shape.auto.widths=[2,1]",
    "tree.shape.auto.prompts=2",
    "tree.shape.auto.tokens=6",
    "tree.shape.auto.repeats=1",
]


def test_tree_auto_is_chosen_before_timing_and_logged(tmp_path, questions, monkeypatch):
    """The runner resolves ``tree=auto`` before the first timed batch, even with
    ``warmup=false`` (the tiny experiment's setting), on training prompts (the default
    source: no evaluated prompt), and logs the tree, its source and its prediction."""
    from hydra import compose, initialize_config_dir

    from stagedspec.app import run_entry as run
    from stagedspec.app.plan import CONF_DIR
    from stagedspec.engine.tree import StaticShape

    monkeypatch.setenv("STAGEDSPEC_CACHE", str(tmp_path / "cache"))
    seen = []
    real = run.decode_paired

    def spy(method_dec, *args, **kw):
        seen.append(method_dec.drafter.tree)
        return real(method_dec, *args, **kw)

    monkeypatch.setattr(run, "decode_paired", spy)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "experiment=tiny",
                "data=spec_bench",
                f"data.path={questions}",
                f"tracking.uri={uri}",
                "max_new_tokens=4",
                *AUTO,
            ],
        )
        assert not cfg.warmup
        metrics = run.execute(cfg, out_dir=tmp_path / "a")
    assert len(seen) == 1 and isinstance(seen[0], StaticShape)  # a chosen tree, not the request
    chosen = json.loads((tmp_path / "a" / "tree_auto.json").read_text())
    assert [list(p) for p in seen[0].paths] == chosen["paths"]
    assert chosen["calibration"]["key"]["source"] == "training"
    assert metrics["tree_auto.predicted_tokens_per_call"] >= 1.0 and metrics["tree_auto.calibration_s"] > 0
    (child,) = runs(tmp_path)
    assert child.data.params["tree_auto.source"] == "training"
    assert json.loads(child.data.params["tree_auto.paths"]) == chosen["paths"]
    assert child.data.tags["stagedspec.tree_auto"].startswith(f"{len(chosen['paths'])} nodes, source training")
    assert "tree_auto.predicted_tokens_per_call" in child.data.metrics
    assert (tmp_path / "cache" / "trees").is_dir()  # the test's own cache, not the user's


def test_tree_auto_on_a_missing_questions_file_is_refused_before_loading(tmp_path, questions, monkeypatch):
    """source=data with no questions file: one ConfigError naming the path and the
    alternative, from the plan (nothing loaded), not a silent switch to training prompts."""
    from hydra import compose, initialize_config_dir

    from stagedspec.app.plan import CONF_DIR, ConfigError, validate_cfg

    missing = tmp_path / "nope.jsonl"
    monkeypatch.setenv("STAGEDSPEC_DATA", str(missing))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "experiment=tiny",
                "data=spec_bench",
                f"data.path={questions}",
                *AUTO,
                "tree.shape.auto.source=data",
            ],
        )
    with pytest.raises(ConfigError, match=f"{missing}.*source=training"):
        validate_cfg(cfg)


def test_predicted_speedup_comes_from_prompts_that_are_not_evaluated(tmp_path, questions):
    """Two jobs on different questions: the out-of-sample prediction (made before timing
    on the training templates) gives the same tokens per call and alpha_hat for both (greedy
    decoding is deterministic), while the in-sample accounting follows each job's own
    prompts; prediction.prompts=0 turns the prediction off; a calibration never decodes more
    tokens per prompt than the job (prediction.tokens=16 is cut to max_new_tokens=10)."""
    from hydra import compose, initialize_config_dir

    from stagedspec.app import run_entry as run
    from stagedspec.app.plan import CONF_DIR

    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"question_id": 3, "category": "math", "turns": ["Add 2 and 2."]}) + "\n")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):

        def job(path, *extra):
            cfg = compose(
                "config",
                overrides=[
                    "experiment=tiny",
                    "data=spec_bench",
                    f"data.path={path}",
                    f"tracking.uri={uri}",
                    "max_new_tokens=10",
                    "prediction.prompts=2",
                    "prediction.tokens=16",
                    "prediction.source=training",
                    *extra,
                ],
            )
            return run.execute(cfg, out_dir=tmp_path / path.stem)

        a, b = job(questions), job(other)
        off = job(other, "prediction.prompts=0")
    for key in ("predicted_tokens_per_call", "prediction_alpha_hat", "prediction_calib_tokens"):
        assert a[key] == b[key], key
    assert a["accounted_tokens_per_call"] != b["accounted_tokens_per_call"]
    # two calibration prompts, each cut from prediction.tokens=16 to the job's max_new_tokens=10 (no EOS in tiny)
    assert a["prediction_calib_tokens"] == 2 * 10
    assert a["prediction_error"] == pytest.approx(a["predicted_speedup"] / a["speedup"] - 1)
    assert not any(k.startswith(("predicted_", "prediction_")) for k in off)
    sources = {r.data.params.get("prediction.calibration") for r in runs(tmp_path)}
    assert sources == {"training templates, 2 prompts x 10 tokens, before timing", None}


def test_heldout_prediction_calibrates_on_questions_of_the_set_that_are_not_evaluated(tmp_path, monkeypatch):
    """prediction.source=heldout (the default): the job evaluates question 1 (coding);
    the calibration decodes the first turns of the other coding questions (2 and 3,
    never 1, never the writing one), encoded as the evaluation encodes them; a job that
    evaluates its whole set falls back to the training templates and its source says so."""
    from hydra import compose, initialize_config_dir

    from stagedspec.app import run_entry as run
    from stagedspec.app.plan import CONF_DIR
    from stagedspec.evaluation import prediction
    from stagedspec.models.chat_text import encode

    qs = tmp_path / "q.jsonl"
    rows = [
        (1, "coding", "Write fib."),
        (2, "coding", "Write gcd in C."),
        (4, "writing", "A poem."),
        (3, "coding", "Sort a list."),
        (5, "writing", "A letter."),
    ]
    qs.write_text(
        "".join(json.dumps({"question_id": i, "category": c, "turns": [t, "More."]}) + "\n" for i, c, t in rows)
    )
    seen = []
    real = prediction.calibration_ids

    def spy(target, *args, **kw):
        ids, where = real(target, *args, **kw)
        seen.append((target, ids, where))
        return ids, where

    monkeypatch.setattr(run, "calibration_ids", spy)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):

        def job(name, *extra):
            cfg = compose(
                "config",
                overrides=[
                    "experiment=tiny",
                    "data=spec_bench",
                    f"data.path={qs}",
                    f"tracking.uri={uri}",
                    "max_new_tokens=8",
                    "prediction.prompts=2",
                    "prediction.tokens=8",
                    *extra,
                ],
            )
            return run.execute(cfg, out_dir=tmp_path / name)

        one = job("one", "data.limit=1")
        every = job("every", "data.limit=null")
    assert one["prediction_calib_tokens"] == 2 * 8 and "predicted_speedup" in every
    (target, ids, where), (_, _, where_every) = seen
    assert where in (
        f"heldout: first turns of spec_bench dev questions {a}, {b} (not evaluated), 8 tokens, before timing"
        for a, b in ((2, 3), (3, 2))
    ), where
    assert {tuple(p) for p in ids} == {tuple(encode(target, t, [])) for i, c, t in rows if i in (2, 3)}
    assert where_every == (
        "training templates (heldout: every dev question of spec_bench is evaluated), "
        "2 prompts x 8 tokens, before timing"
    )
    logged = {r.data.params.get("prediction.calibration") for r in runs(tmp_path)}
    assert logged == {where, where_every}


def test_an_error_after_loading_is_one_line_and_a_traceback_file(tmp_path, questions):
    """Not a config error (the test hook raises mid-job): one line on stderr naming the file
    in the job's output directory that holds the full traceback."""
    cmd = [
        sys.executable,
        "-m",
        "stagedspec.run",
        "experiment=tiny",
        "tracking=none",
        "data=spec_bench",
        f"data.path={questions}",
        f"hydra.run.dir={tmp_path}/run",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "STAGEDSPEC_FAIL_MODE")}
    env.update({"TQDM_DISABLE": "1", "STAGEDSPEC_FAIL_AFTER_JOBS": "0", "PYTHONPATH": str(REPO)})
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    where = tmp_path / "run" / "traceback.txt"
    line = f"error: RuntimeError: test hook STAGEDSPEC_FAIL_AFTER_JOBS=0: job 0 fails mid-way (full traceback: {where})"
    assert line in p.stderr.splitlines(), p.stderr
    assert "Traceback" in where.read_text() and "_maybe_fail" in where.read_text()
