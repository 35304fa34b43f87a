"""The job's assembly (``evaluation/job.py``) and the no-op tracker that stands in for
MLflow when tracking is off."""

from __future__ import annotations

import inspect

import pytest
from hydra import compose, initialize_config_dir

from stagedspec.app.generate_entry import EXTRA_KEYS
from stagedspec.app.plan import CONF_DIR, validate_cfg
from stagedspec.app.tracking import NoTracker, Tracker
from stagedspec.engine.tree import StaticShape
from stagedspec.evaluation.job import assemble_job
from stagedspec.tuning import auto_tree, tree_calibration

AUTO = [
    "tree=auto",
    "tree.shape.auto.max_nodes=4",
    "tree.shape.auto.widths=[2,1]",
    "tree.shape.auto.prompts=2",
    "tree.shape.auto.tokens=6",
    "tree.shape.auto.repeats=1",
]


def _plan(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            config_name="generate", overrides=["experiment=tiny", "max_new_tokens=8", "prompt=hello", *overrides]
        )
    return validate_cfg(cfg, with_data=False, extra_keys=EXTRA_KEYS)


def test_assembly_resolves_tree_auto_before_returning(tmp_path, monkeypatch):
    """The returned job's drafter holds the chosen tree and nothing of the tuning room:
    decoding it never calls back into tuning (every way in raises here)."""
    monkeypatch.setenv("STAGEDSPEC_CACHE", str(tmp_path))
    job = assemble_job(_plan(*AUTO))
    assert job.tree_choice is not None
    assert isinstance(job.drafter.tree, StaticShape) and not hasattr(job.drafter, "auto")
    assert [list(p) for p in job.drafter.tree.paths] == job.tree_choice.paths
    assert list((tmp_path / "trees").glob("*.json"))  # cached in the target's cache, under the hierarchy's key

    def no_call_back(*args, **kwargs):
        raise AssertionError("decoding called back into tuning")

    for module, name in (
        (auto_tree, "resolve_auto_tree"),
        (auto_tree, "calibrate"),
        (auto_tree, "choose"),
        (tree_calibration, "calibrate"),
    ):
        monkeypatch.setattr(module, name, no_call_back)
    for dec in job.decoders:
        dec.generate([[1, 2, 3]], 4)


def test_assembly_pairs_a_baseline_only_with_levels():
    job = assemble_job(_plan())
    assert job.drafter is not None and job.baseline is not None and job.decoders == (job.method, job.baseline)
    assert job.baseline.drafter is None and job.baseline.plan is job.method.plan
    plain = assemble_job(_plan("levels.ngram=null", "levels.small=null"))
    assert plain.drafter is None and plain.baseline is None and plain.decoders == (plain.method,)
    assert plain.tree_choice is None and plain.draft_models == {}
    assert job.max_prompt == job.target.context_length - 8 - job.method.draft_depth


def test_no_tracker_has_the_writers_methods():
    public = {n: f for n, f in inspect.getmembers(Tracker, inspect.isfunction) if not n.startswith("_")}
    assert public
    for name, f in public.items():
        stub = getattr(NoTracker, name, None)
        assert stub is not None, name
        assert list(inspect.signature(stub).parameters) == list(inspect.signature(f).parameters), name
    t = NoTracker()
    assert t.finished_child("abc") is None and t.start_child(None, "abc", "n", {}) is None
    t.log(None, params={"a": 1}, metrics={"m": 1.0}, tags={"t": "x"})
    t.end(None, "FAILED")


@pytest.mark.parametrize("levels", [[], ["levels.small=null"]])
def test_assembly_without_tree_auto_has_no_choice(levels):
    assert assemble_job(_plan(*levels)).tree_choice is None
