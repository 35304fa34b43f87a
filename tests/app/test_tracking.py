"""What the tracker writes and how it reads back, without running a sweep: params, run
names, the headline-first metric order, the stepped per-position acceptance (and the
report's loader reading both layouts), error messages for unknown keys."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir

from analysis.load import load_runs
from stagedspec.app.identity import job_params, run_name, sweep_name
from stagedspec.app.plan import CONF_DIR, ConfigError, validate_cfg
from stagedspec.app.tracking import Tracker, context_tags
from stagedspec.app.tracking_text import HEADLINE, child_note, headline_view, speedup_text
from stagedspec.app.validation import check_keys, unknown_key


@pytest.fixture(scope="module")
def cfg():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield compose(
            "config",
            overrides=[
                "stack=smollm2",
                "data.per_category=1",
                "data.max_turns=1",
                "levels.small=null",
                "levels.ngram.k=2",
            ],
        )


def test_job_params_hold_each_setting_once(cfg):
    p = job_params(cfg, validate_cfg(cfg))
    assert p["method"] == "ngram>target" and p["draft_k"] == 2 and p["temperature"] == 0.0
    assert p["data.name"] == "mt_bench" and p["n_questions"] == 8 and p["n_prompts"] == 8
    assert p["levels.ngram.order"] == 3 and p["target.source"] == "embedded" and p["seed"] == 0
    assert not [k for k in p if k.endswith("_target_")]
    assert None not in p.values()
    for repeat in (
        "levels.ngram.k",
        "sampling.temperature",
        "sampling.seed",
        "target.device",
        "tree.shape",
        "levels.ngram.stage",
        "levels.ngram.enabled",
        "experiment_name",
        "resume",
        "tracking.uri",
    ):
        assert repeat not in p, repeat
    assert len(p) <= 32  # 28 settings before data.split, target.weights, target.backend and sampling.coupling


def test_run_names():
    base = "ngram>small>target k=4 T=0"
    task = [
        "levels.small.k=4",
        "sampling=greedy",
        "batch_size=2",
        "max_new_tokens=16",
        "tracking.uri=x",
        "data.path=/q.jsonl",
        "experiment=tiny",
    ]
    assert run_name(base, task, ["levels.small.k", "sampling"], "small") == base
    assert run_name(base, task, ["levels.small.k", "batch_size"], "small") == base + " bs=2"
    assert run_name(base, task, None, "small") == base + " bs=2 new=16"
    assert run_name(base, ["levels.ngram.k=3", "levels.ngram.enabled=false"], None, "small") == base + " ngram.k=3"
    assert run_name("target T=0.7", ["tree=medusa", "+drafter@levels.x=katz"], None, None) == "target T=0.7 tree=medusa"
    assert sweep_name("default", ["levels.ngram.k", "sampling"], 8) == "default: levels.ngram.k x sampling, 8 jobs"
    assert sweep_name("tiny", [], 1) == "tiny: one job"


def test_unknown_key_messages():
    e = unknown_key("", "level", ["levels", "data"], {"ngram": {"k": 2}})
    assert str(e) == (
        "unknown config key 'level.ngram.k': 'level' is not a key at the top level; did you mean 'levels.ngram.k'?"
    )
    e = unknown_key("data", "xyz", ["limit", "path"], 3)
    assert str(e) == "unknown config key 'data.xyz': 'xyz' is not a key in 'data'; valid keys: ['limit', 'path']"


def test_check_keys_allows_the_entry_points_own(cfg):
    from omegaconf import OmegaConf

    with_prompt = OmegaConf.merge(OmegaConf.create(OmegaConf.to_container(cfg)), {"prompt": "hi"})
    with pytest.raises(ConfigError, match="'prompt'"):
        check_keys(with_prompt)
    check_keys(with_prompt, ("prompt",))


@pytest.fixture
def tracker(tmp_path):
    return Tracker(f"sqlite:///{tmp_path}/mlflow.db", "t")


def test_headline_first_and_position_acceptance_stepped(tracker, tmp_path):
    run_id = tracker.start_child(None, "h", "job", {"stagedspec.method": "ngram>target"})
    metrics = {
        "rounds": 3.0,
        "position_acceptance/1": 0.9,
        "position_acceptance/2": 0.5,
        "tokens_per_s": 10.0,
        "acceptance_rate": 0.7,
        "speedup_ci_high": 1.4,
        "speedup": 1.2,
        "speedup_ci_low": 1.0,
        "nan_metric": float("nan"),
    }
    tracker.log(run_id, params={"draft_k": 2}, metrics=metrics)
    tracker.end(run_id)
    run = tracker.client.get_run(run_id)
    assert list(run.data.metrics)[:5] == [
        "speedup",
        "speedup_ci_low",
        "speedup_ci_high",
        "acceptance_rate",
        "tokens_per_s",
    ]
    assert "position_acceptance/1" not in run.data.metrics and "nan_metric" not in run.data.metrics
    hist = tracker.client.get_metric_history(run_id, "position_acceptance")
    assert sorted((m.step, m.value) for m in hist) == [(1, 0.9), (2, 0.5)]
    # the report's loader turns the steps back into one column per position
    tracker.client.set_tag(run_id, "stagedspec.role", "child")
    df = load_runs(tracker.uri, "t")
    assert df.loc[0, "metrics.position_acceptance/1"] == 0.9 and df.loc[0, "metrics.position_acceptance/2"] == 0.5
    assert "metrics.position_acceptance" not in df.columns


def test_loader_still_reads_the_flat_layout(tracker):
    run_id = tracker.start_child(None, "h2", "old", {})
    tracker.client.log_metric(run_id, "position_acceptance/1", 0.8)
    tracker.end(run_id)
    assert load_runs(tracker.uri, "t").loc[0, "metrics.position_acceptance/1"] == 0.8


def test_experiment_reads_as_a_results_table(tracker):
    exp = tracker.client.get_experiment(tracker.experiment_id)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # not the UI's GenAI mode
    assert json.loads(exp.tags["mlflow.sharedViewState.stagedspec-headline"]) == headline_view()
    assert "viewStateShareKey=stagedspec-headline" in exp.tags["mlflow.note.content"]
    assert [c for c in headline_view()["selectedColumns"] if c.startswith("metrics.")] == [
        f"metrics.`{m}`" for m in HEADLINE
    ]
    # a description someone wrote is kept
    tracker.client.set_experiment_tag(tracker.experiment_id, "mlflow.note.content", "mine")
    again = Tracker(tracker.uri, "t")
    assert again.client.get_experiment(again.experiment_id).tags["mlflow.note.content"] == "mine"


def test_speedup_text_shows_the_interval_only_when_measured():
    assert speedup_text({"speedup": 1.234}) == "1.23×"
    assert speedup_text({"speedup": 1.2, "speedup_ci_low": 1.1, "speedup_ci_high": 1.3}) == "1.20× (95% CI 1.10–1.30)"


def test_context_tags_come_from_mlflow():
    tags = context_tags()
    assert tags["mlflow.source.type"] == "LOCAL" and "mlflow.user" in tags and "mlflow.source.name" in tags


def test_system_metrics_come_after_the_headline(tmp_path, monkeypatch):
    import time

    from stagedspec.app import tracking

    monkeypatch.setattr(tracking, "SYSTEM_METRICS_INTERVAL_S", 0.2)
    t = Tracker(f"sqlite:///{tmp_path}/mlflow.db", "t", system_metrics=True)
    run_id = t.start_child(None, "h", "job", {})
    time.sleep(1.0)  # a few samples, held while the job runs
    assert not [k for k in t.client.get_run(run_id).data.metrics if k.startswith("system/")]
    t.log(run_id, metrics={"speedup": 1.5, "rounds": 3})
    t.end(run_id)
    keys = list(t.client.get_run(run_id).data.metrics)
    assert keys[:2] == ["speedup", "rounds"] and "system/cpu_utilization_percentage" in keys


def test_the_job_note_states_the_earliest_divergence_and_widest_gap():
    m = {
        "tokens_per_s": 10.0,
        "ar_match_rate": 2 / 3,
        "ar_divergences": 1.0,
        "ar_first_divergence_min": 18.0,
        "ar_divergence_gap_steps_max": 1.0,
    }
    note = child_note("job", m, "humaneval (3 questions)", 64)
    assert "identical to plain decoding on 67% of prompt turns" in note
    assert "at token 18 at the earliest" in note and "at most 1.0 steps of its dtype" in note
    same = child_note("job", {**m, "ar_match_rate": 1.0, "ar_divergences": 0.0}, "humaneval (3 questions)", 64)
    assert "on 100% of prompt turns" in same and "earliest" not in same
