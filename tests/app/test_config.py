"""Every preset and group option composes and validates; every bad override fails before
any model is loaded, with a message that names the bad value."""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict

from stagedspec.app.cli import CliError, entry_errors
from stagedspec.app.identity import config_hash, sweep_id
from stagedspec.app.plan import CONF_DIR, ConfigError, validate_cfg
from stagedspec.app.validation import instantiate, levels_from_cfg
from stagedspec.models import model_loading as models
from stagedspec.prompts.prompt_sets import SPEC_BENCH_CATEGORIES

PRESETS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


@pytest.fixture(scope="module")
def questions_file(tmp_path_factory) -> Path:
    """One two-turn question per Spec-Bench category: every preset's filter finds some."""
    path = tmp_path_factory.mktemp("data") / "q.jsonl"
    rows = [
        {"question_id": i, "category": c, "turns": [f"Question {i} about {c}?", "And a follow-up?"]}
        for i, c in enumerate(SPEC_BENCH_CATEGORIES)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def hydra_ctx():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def make(*overrides: str, hydra: bool = False) -> DictConfig:
    return compose("config", overrides=list(overrides), return_hydra_config=hydra)


@pytest.fixture
def no_model_loads(monkeypatch):
    """Fail the test if anything tries to load a model."""

    def refuse(spec):
        raise AssertionError(f"a model was loaded ({spec}) before validation finished")

    monkeypatch.setattr(models, "load_model", refuse)
    monkeypatch.setattr(models, "truncated_copy", refuse)


# ------------------------------------------------------------------ everything composes
def sweep_points(preset: str) -> list[list[str]]:
    """Every job of a preset's sweep as override lists (the compose API does not sweep)."""
    cfg = make(f"experiment={preset}", hydra=True)
    params = cfg.hydra.sweeper.params or {}
    axes = [[f"{k}={v.strip()}" for v in str(vals).split(",")] for k, vals in params.items()]
    return [list(p) for p in itertools.product(*axes)]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_and_sweep_point_validates(hydra_ctx, no_model_loads, preset):
    points = sweep_points(preset)
    assert points
    hashes = set()
    for point in points:
        cfg = make(f"experiment={preset}", *point)  # on the prompt set it names (MT-bench by default)
        plan = validate_cfg(cfg)
        assert plan.questions and plan.batch_size >= 1 and plan.max_new_tokens >= 1
        hashes.add(config_hash(cfg))
    assert len(hashes) == len(points), "every job of a sweep must have its own config hash"


def test_base_config_validates_on_the_shipped_data(hydra_ctx, no_model_loads):
    """The default prompt set and models ship in packages: no file beside the repository needed."""
    plan = validate_cfg(make())
    assert plan.method == "ngram>small>copy>target" and plan.tree == "chain"
    assert plan.target.embedded == "qwen2.5-coder-1.5b" and plan.target.dtype == "bfloat16"
    assert plan.data_name == "humaneval" and len(plan.questions) == 109  # the test split
    assert plan.data_path.is_file()
    humaneval = validate_cfg(make("data.limit=3"))
    assert [q.question_id for q in humaneval.questions] == [1, 2, 4]  # the first 3 of the test split
    assert [q.question_id for q in validate_cfg(make("data.limit=3", "data.split=all")).questions] == [0, 1, 2]
    small = validate_cfg(make("stack=smollm2"))
    assert small.method == "ngram>small>target" and small.data_name == "mt_bench" and len(small.questions) == 40
    assert small.target.embedded == "smollm2-135m" and small.levels[-1].weights == "embedded-layers"


def test_default_preset_is_the_staged_sweep_on_the_pair(hydra_ctx):
    """The main command: the staged hierarchy against its two-level ablations at T = 0 and
    T = 0.7 on a few HumanEval problems, the staged default's draft-length axis (the 0.5B's
    k, 4 values) and batch-size axis (1 and 4), small enough for 15 minutes on 2 cores."""
    points = sweep_points("default")
    assert len(points) == 12
    jobs = {}
    for point in points:
        cfg = make("experiment=default", *point)
        plan = validate_cfg(cfg)
        assert cfg.max_new_tokens <= 64 and plan.data_name == "humaneval" and len(plan.questions) <= 4
        assert plan.target.embedded == "qwen2.5-coder-1.5b"
        jobs[point[0].removeprefix("+point=")] = (
            plan.method,
            cfg.sampling.temperature,
            cfg.levels.small.k,
            cfg.batch_size,
            cfg.max_new_tokens,
            len(plan.questions),
        )
    staged, standard, lookup = "ngram>small>copy>target", "small>target", "copy>target"
    assert {name: job[:2] for name, job in jobs.items() if not name.startswith(("staged_k", "staged_batch"))} == {
        "staged_greedy": (staged, 0.0),
        "standard_greedy": (standard, 0.0),
        "lookup_greedy": (lookup, 0.0),
        "staged_t07": (staged, 0.7),
        "standard_t07": (standard, 0.7),
        "lookup_t07": (lookup, 0.7),
    }
    # the axes: one setting varies along each, everything else equal
    assert [jobs[f"staged_k{k}"] for k in (4, 8, 12, 16)] == [(staged, 0.0, k, 1, 32, 3) for k in (4, 8, 12, 16)]
    assert [jobs[f"staged_batch{b}"] for b in (1, 4)] == [(staged, 0.0, 12, b, 32, 4) for b in (1, 4)]


@pytest.mark.parametrize("group", ["target", "sampling", "data", "tracking"])
def test_every_group_option_validates(hydra_ctx, questions_file, no_model_loads, group):
    for opt in options(group):
        needs_file = group == "data" and opt == "spec_bench"
        # a target of another vocabulary takes its own stack (the default levels are the Qwen pair's)
        stack = {"smollm2": ["stack=smollm2"], "tiny": ["experiment=tiny"]}.get(opt, []) if group == "target" else []
        validate_cfg(make(*stack, f"{group}={opt}", *([f"data.path={questions_file}"] if needs_file else [])))


def test_every_drafter_option_validates_as_top_or_only_level(hydra_ctx, questions_file, no_model_loads):
    for opt in options("drafter"):
        target = "target=tiny" if opt == "small_tiny" else "target=smollm2"  # same vocabulary
        if opt == "qwen_coder_0p5b":
            target = "target=qwen_coder_1p5b"
        cfg = make(
            "levels.ngram=null",
            "levels.copy=null",
            f"drafter@levels.small={opt}",
            "data=spec_bench",
            f"data.path={questions_file}",
            target,
        )
        (lv,) = validate_cfg(cfg).levels
        assert lv.name == "small"
    for opt in ("katz", "prompt_lookup"):  # lowest-only levels under a model level
        plan = validate_cfg(make(f"drafter@levels.ngram={opt}", "data=spec_bench", f"data.path={questions_file}"))
        assert plan.method == "ngram>small>copy>target"


def test_every_tree_option_validates(hydra_ctx, questions_file, no_model_loads):
    for opt in options("tree"):
        # ngram > target, small > target, and small under the bypass level (the tree goes to small)
        for drop in (
            ["levels.small=null", "levels.copy=null"],
            ["levels.ngram=null", "levels.copy=null"],
            ["levels.ngram=null"],
        ):
            if opt == "auto" and drop == ["levels.ngram=null"]:
                continue  # refused: test_bad_override_fails_before_loading
            plan = validate_cfg(make(f"tree={opt}", *drop, "data=spec_bench", f"data.path={questions_file}"))
            assert (plan.tree == "chain") == (opt == "chain")


@pytest.mark.parametrize(
    "launcher, cls",
    [
        ("basic", "BasicLauncher"),
        ("joblib", "JoblibLauncher"),
        ("parallel", "JoblibLauncher"),
        ("submitit_slurm", "SlurmLauncher"),
        ("slurm", "SlurmLauncher"),
    ],
)
def test_launchers_compose(hydra_ctx, launcher, cls):
    cfg = make(f"hydra/launcher={launcher}", hydra=True)
    assert cfg.hydra.launcher._target_.endswith(cls)
    assert cfg.hydra.callbacks.tracking._target_ == "stagedspec.app.sweep_callback.TrackingCallback"


# ------------------------------------------------------------------ levels from the CLI
def test_levels_drop_add_and_order(hydra_ctx, questions_file):
    d = "stack=smollm2"
    assert [lv.name for lv in levels_from_cfg(make())] == ["ngram", "small", "copy"]
    assert [lv.name for lv in levels_from_cfg(make(d))] == ["ngram", "small"]
    assert levels_from_cfg(make("levels.ngram=null", "levels.small=null", d)) == []
    assert validate_cfg(make("levels.ngram=null", "levels.small=null", d)).method == "target"
    assert validate_cfg(make("levels.ngram.enabled=false", d)).method == "small>target"
    # the added slot comes last, but its stage (0) puts it below the small model (1)
    plan = validate_cfg(make("+drafter@levels.lookup=prompt_lookup", "levels.ngram=null", d))
    assert plan.method == "lookup>small>target"
    # stage decides over slot order; ties keep slot order
    assert [lv.name for lv in levels_from_cfg(make("levels.ngram.stage=5", "levels.small.stage=2", d))] == [
        "small",
        "ngram",
    ]
    swapped = make("levels.ngram=null", "+drafter@levels.big=truncated", "levels.big.stage=0", d)
    assert [lv.name for lv in levels_from_cfg(swapped)] == ["big", "small"]


def test_top_level_tree_goes_to_the_top_level(hydra_ctx, questions_file):
    plan = validate_cfg(
        make(
            "tree=specinfer_221",
            "levels.small=null",
            "levels.copy=null",
            "data=spec_bench",
            f"data.path={questions_file}",
        )
    )
    assert plan.levels[-1].tree == {"widths": [2, 2, 1]}
    assert plan.tree.startswith("[[0],[1],")
    # under a bypass level (a router), the tree goes to the level it passes rounds down to
    plan = validate_cfg(make("tree=specinfer_221", "data=spec_bench", f"data.path={questions_file}"))
    assert [lv.name for lv in plan.levels] == ["ngram", "small", "copy"]
    assert plan.levels[1].tree == {"widths": [2, 2, 1]} and plan.levels[0].tree is None


def test_instantiate_allows_only_our_classes():
    with pytest.raises(ConfigError, match="os.system"):
        instantiate({"_target_": "os.system", "command": "true"}, "x")
    spec = instantiate({"_target_": "stagedspec.models.model_loading.ModelSpec", "source": "tiny"})
    assert isinstance(spec, models.ModelSpec) and spec.source == "tiny"


# ------------------------------------------------------------------ config hash
def test_config_hash_ignores_bookkeeping_only(hydra_ctx, questions_file):
    d = "data=mt_bench"
    base = config_hash(make("experiment=tiny", d))
    assert base == config_hash(make("experiment=tiny", d))
    assert base == config_hash(make("experiment=tiny", d, "tracking=server", "experiment_name=other"))
    assert base != config_hash(make("experiment=tiny", d, "levels.small.k=3"))
    assert base != config_hash(make("experiment=tiny", d, "sampling=t07"))
    # two spellings of the same hierarchy are the same job
    assert config_hash(make("experiment=tiny", d, "levels.ngram=null")) == config_hash(
        make("experiment=tiny", d, "levels.ngram.enabled=false")
    )


def test_sweep_id_ignores_order_and_bookkeeping():
    a = sweep_id("e", ["levels.small.k=1,2", "sampling=greedy,t07", "tracking.uri=sqlite:///a"])
    b = sweep_id("e", ["sampling=greedy,t07", "levels.small.k=1,2", "hydra.sweep.dir=/x"])
    assert a == b
    assert a != sweep_id("e", ["levels.small.k=1,2,4", "sampling=greedy,t07"])
    assert a != sweep_id("f", ["levels.small.k=1,2", "sampling=greedy,t07"])


# ------------------------------------------------------------------ bad overrides fail early
def bad_jsonl(tmp_path: Path) -> Path:
    p = tmp_path / "bad.jsonl"
    p.write_text(
        json.dumps({"question_id": 1, "category": "qa", "turns": ["ok?"]}) + "\n" + '{"question_id": 2, "categ\n'
    )
    return p


BAD = [
    # (overrides, words the error must contain)
    (
        ["+levels.foo={_target_:stagedspec.drafters.hierarchy.Nope,k:2}"],
        ["levels.foo", "stagedspec.drafters.hierarchy.Nope", "NgramLevel"],
    ),
    (["levels.small._target_=builtins.eval"], ["levels.small", "builtins.eval", "ModelLevel"]),
    (["+levels.foo={k:2}"], ["levels.foo", "no _target_", "katz"]),
    (["levels.small.k=0"], ["levels.small: draft length k", "got 0"]),
    (["levels.ngram.k=-3"], ["levels.ngram: draft length k", "got -3"]),
    (["sampling.temperature=-1"], ["temperature", "-1"]),
    (["sampling.top_p=1.5"], ["top_p", "1.5"]),
    (["sampling.top_p=0"], ["top_p", "got 0"]),
    (["batch_size=0"], ["batch_size", "got 0"]),
    (["max_new_tokens=0"], ["max_new_tokens", "got 0"]),
    (["+levels.small.kk=3"], ["levels.small", "'kk'"]),
    (["levels.small.model.layers=0"], ["layers", "0"]),
    (["target.dtype=float8"], ["target", "float8"]),
    (["levels.ngram.tree=auto"], ["'ngram'", "tree=auto", "'small'"]),  # auto only on the top level
    (["levels.copy.enabled=true", "tree=auto"], ["'small'", "tree=auto", "'copy'", "levels.copy=null"]),
    (["levels.small=null", "+drafter@levels.lookup=prompt_lookup", "tree=dynamic"], ["'lookup'", "chains only"]),
    (["+drafter@levels.late=katz", "levels.late.stage=3"], ["'late'", "lowest"]),
    (["+levels.x={_target_:stagedspec.drafters.hierarchy.NgramLevel}"], ["['x']", "stage"]),
    (["data.categories=[qa,poetry]"], ["poetry"]),
    (["data.path=/nonexistent/questions.jsonl"], ["/nonexistent/questions.jsonl"]),
    # keys nothing reads: named, with the nearest valid one (a '+' adds a key, it fixes no typo)
    (["+level.ngram.k=2"], ["'level.ngram.k'", "did you mean 'levels.ngram.k'?"]),
    (["+dataa.limit=2"], ["'dataa.limit'", "did you mean 'data.limit'?"]),
    (["+tracking.urii=x"], ["'tracking.urii'", "did you mean 'tracking.uri'?"]),
    (["+levels.ngram.stages=1"], ["'levels.ngram.stages'", "did you mean 'levels.ngram.stage'?"]),
    (["+sampling.temprature=1"], ["'sampling.temprature'", "did you mean 'sampling.temperature'?"]),
    (["+zzz=1"], ["'zzz'", "valid keys", "max_new_tokens"]),
    # a value its source never reads
    (["+target.path=/nope"], ["target.path='/nope'", "source 'tiny'"]),
    (["+levels.small.model.path=/m"], ["levels.small.model.path='/m'", "source 'truncated'"]),
    (["data.max_turns=0"], ["max_turns", "got 0"]),
    (["data.name=mtbench"], ["'mtbench'", "data=mt_bench"]),
]


@pytest.mark.parametrize("overrides, words", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_override_fails_before_loading(hydra_ctx, questions_file, no_model_loads, tmp_path, overrides, words):
    from stagedspec.app import run_entry as run

    cfg = make("experiment=tiny", "data=spec_bench", f"data.path={questions_file}", "tracking=none", *overrides)
    with pytest.raises(ConfigError) as e:
        run.execute(cfg, out_dir=tmp_path)
    for w in words:
        assert w in str(e.value), f"{w!r} not in {str(e.value)!r}"


def test_malformed_jsonl_line_is_named(hydra_ctx, no_model_loads, tmp_path):
    from stagedspec.app import run_entry as run

    bad = bad_jsonl(tmp_path)
    with pytest.raises(ConfigError, match=f"{bad}:2"):
        run.execute(make("experiment=tiny", "data=spec_bench", f"data.path={bad}", "tracking=none"), out_dir=tmp_path)


def test_unknown_drafter_option_fails_at_compose(hydra_ctx):
    with pytest.raises(HydraException, match="nonexistent"):
        make("+drafter@levels.x=nonexistent")


def test_drafter_with_another_vocabulary_fails_before_models_load(hydra_ctx, questions_file, no_model_loads):
    """The vocabulary size is read from the configs' metadata, so a mismatched level is
    refused before any weights load, naming the level and both sizes."""
    cfg = make(
        "experiment=tiny",
        "data=spec_bench",
        f"data.path={questions_file}",
        "tracking=none",
        "levels.ngram=null",
        "drafter@levels.small=small_tiny",
        "levels.small.model.tiny.vocab_size=64",
    )
    with pytest.raises(ConfigError, match=r"levels\.small: .*vocabulary of 64 tokens but the target has 128"):
        validate_cfg(cfg)


def test_tokenizer_mismatch_is_caught_after_loading_before_decoding(tmp_path):
    """Same size, different tokens: only the loaded tokenizers tell, and the build step
    refuses it (naming the level) before any decoding."""
    from stagedspec.models.model_loading import check_compatible

    class Tok:
        def __init__(self, vocab):
            self.vocab = vocab

        def get_vocab(self):
            return self.vocab

    from types import SimpleNamespace

    a = SimpleNamespace(vocab_size=3, tokenizer=Tok({"a": 0, "b": 1, "c": 2}), name="t")
    b = SimpleNamespace(vocab_size=3, tokenizer=Tok({"a": 0, "b": 2, "c": 1}), name="d")
    with pytest.raises(ValueError, match="small"):
        check_compatible(a, b, "small")


# ------------------------------------------------------------------ prompt sets
def test_packaged_prompt_set_refuses_a_path(hydra_ctx, no_model_loads, tmp_path):
    with pytest.raises(ConfigError, match=r"data.path='/x.jsonl' is ignored by data=mt_bench.*data=spec_bench"):
        validate_cfg(make("data=mt_bench", "data.path=/x.jsonl"))
    with pytest.raises(ConfigError, match=r"unknown categories \['qa'\] for the mt_bench prompts.*'writing'"):
        validate_cfg(make("data=mt_bench", "data.categories=[qa]"))
    with pytest.raises(ConfigError, match=r"unknown categories \['writing'\] for the humaneval prompts.*'coding'"):
        validate_cfg(make("data=humaneval", "data.categories=[writing]"))


def test_spec_bench_needs_a_file(hydra_ctx, no_model_loads, questions_file, monkeypatch):
    monkeypatch.delenv("STAGEDSPEC_DATA", raising=False)
    with pytest.raises(ConfigError, match=r"data=spec_bench reads a JSONL file and none was given.*data.path="):
        validate_cfg(make("data=spec_bench"))
    monkeypatch.setenv("STAGEDSPEC_DATA", str(questions_file))
    by_env = make("data=spec_bench")
    assert validate_cfg(by_env).data_path == questions_file.resolve()
    assert config_hash(by_env) == config_hash(make("data=spec_bench", f"data.path={questions_file}"))


def test_prompt_set_filters(hydra_ctx, no_model_loads):
    plan = validate_cfg(
        make("data=mt_bench", "data.categories=[coding,math]", "data.per_category=2", "data.max_turns=1")
    )
    assert [(q.category, len(q.turns)) for q in plan.questions] == [("math", 1)] * 2 + [("coding", 1)] * 2
    assert len(validate_cfg(make("data=mt_bench", "data.limit=5")).questions) == 5


def test_data_split_selects_only_its_questions(hydra_ctx, no_model_loads):
    """data.split=dev evaluates only dev items, test only test items, before data.limit;
    the held-out calibration prompts come from dev whatever the job evaluates."""
    dev = validate_cfg(make("data.split=dev"))
    assert [q.question_id for q in dev.questions] == list(range(0, 164, 3))
    test = validate_cfg(make("data.split=test", "data.limit=4"))
    assert [q.question_id for q in test.questions] == [1, 2, 4, 5]
    assert test.heldout_questions and all(q.question_id % 3 == 0 for q in test.heldout_questions)
    mt_dev = validate_cfg(make("data=mt_bench", "data.split=dev", "data.limit=3"))
    assert [q.question_id for q in mt_dev.questions] == [81, 83, 85]
    mt_test = validate_cfg(make("data=mt_bench"))
    assert mt_test.heldout_questions and all(q.question_id % 2 == 1 for q in mt_test.heldout_questions)


def test_heldout_calibration_never_uses_evaluated_dev_questions(hydra_ctx, no_model_loads):
    plan = validate_cfg(make("data.split=dev", "data.limit=5"))
    evaluated = {q.question_id for q in plan.questions}
    assert plan.heldout_questions and all(q.question_id % 3 == 0 for q in plan.heldout_questions)
    assert not evaluated & {q.question_id for q in plan.heldout_questions}


@pytest.mark.parametrize("bad", ["train", "Test", "1"])
def test_bad_data_split_is_one_line_naming_the_valid_ones(hydra_ctx, no_model_loads, bad):
    with pytest.raises(ConfigError) as e:
        validate_cfg(make(f"data.split={bad}"))
    msg = str(e.value)
    assert "\n" not in msg and "data.split: unknown split" in msg and "['dev', 'test', 'all']" in msg


def test_split_all_keeps_the_hash_of_a_config_without_a_split(hydra_ctx):
    """``data.split=all`` selects what a job selected before splits: same hash, so a re-run
    finds its finished run; dev and test select other questions and hash apart."""
    cfg = make("data.split=all")
    hashes = {config_hash(make(f"data.split={s}")) for s in ("dev", "test")}

    old = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(old):
        del old.data["split"]
    assert config_hash(cfg) == config_hash(old)
    assert len(hashes | {config_hash(cfg)}) == 3


def test_every_allowed_target_keeps_its_hashed_spelling():
    """Config hashes spell ``_target_`` as before the rooms (issue 19): a class the configs
    may name without an entry in ``HASHED_TARGETS`` would hash under its new path."""
    from stagedspec.app.identity import HASHED_TARGETS
    from stagedspec.app.validation import ALLOWED_TARGETS

    assert set(ALLOWED_TARGETS) == set(HASHED_TARGETS)


# ------------------------------------------------------------------ bad input, refused before loading (issue 35)
def one_line_error(*overrides: str) -> str:
    """The ConfigError message validation gives for ``overrides`` (it must be one line)."""
    with pytest.raises(ConfigError) as e:
        validate_cfg(make(*overrides))
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_temperature_must_be_finite(hydra_ctx, no_model_loads, value):
    """nan passed every comparison (every draft accepted, then a crash in multinomial after
    the models loaded); inf made every distribution uniform."""
    msg = one_line_error(f"sampling.temperature={value}")
    assert "sampling: temperature must be a finite number >= 0" in msg and value.lstrip("-") in msg


@pytest.mark.parametrize("value, shown", [("1.5", "1.5"), ("abc", "'abc'"), ("-1", "-1"), ("true", "True")])
def test_sampling_seed_must_be_an_integer(hydra_ctx, no_model_loads, value, shown):
    msg = one_line_error(f"sampling.seed={value}")
    assert f"sampling: seed must be an integer >= 0, got {shown}" in msg


def numeric_leaves(cfg: DictConfig) -> list[str]:
    """Dotted keys of every int or float value a job reads (not Hydra's, not tracking's,
    not a disabled level's)."""
    out = []

    def walk(node, prefix):
        if isinstance(node, dict):
            if node.get("enabled") is False:
                return
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            out.append(prefix)

    walk(
        {
            k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
            for k in cfg
            if k not in ("hydra", "tracking")
        },
        "",
    )
    return out


@pytest.mark.parametrize("base", [[], ["experiment=tiny"], ["stack=smollm2", "tree=dynamic"]])
def test_a_boolean_is_no_number_anywhere(hydra_ctx, no_model_loads, base):
    """Every number a job reads, set to true, is refused naming it (True == 1 in Python)."""
    keys = numeric_leaves(make(*base))
    assert "levels.small.k" in keys and "sampling.temperature" in keys
    for key in keys:
        msg = one_line_error(*base, f"{key}=true")
        assert "True" in msg, (key, msg)
    for key in ("data.limit", "data.per_category", "data.max_turns", "target.threads"):  # null by default
        assert "True" in one_line_error(*base, f"{key}=true"), key
    if not base:  # the 0.5B's pruned head (null: the full head)
        assert "True" in one_line_error("levels.small.head=true")


def test_context_length_is_checked_before_loading(hydra_ctx, no_model_loads):
    """max_new_tokens + the draft depth against the target's positions, from its metadata:
    the tiny model's 512 with depth 2; the default 1.5B's 32768 with the bypass level's 24."""
    assert "no room for a prompt in the target's context of 512 tokens" in one_line_error(
        "experiment=tiny", "max_new_tokens=510"
    )
    assert validate_cfg(make("experiment=tiny", "max_new_tokens=509")).max_new_tokens == 509
    msg = one_line_error("max_new_tokens=32744")
    assert "draft depth 24" in msg and "32768" in msg and "at most 32743" in msg
    assert "draft depth 12" in one_line_error("levels.copy=null", "max_new_tokens=32756")


def test_unwritable_cache_dir_is_refused_before_assembling(hydra_ctx, no_model_loads, tmp_path, monkeypatch):
    """A model with no cached copy in a cache_dir that cannot be written is refused (the
    GGUF would be assembled and dequantized first); one whose copy is there may be read-only."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    msg = one_line_error(f"target.cache_dir={blocker}/cache")
    assert msg.startswith(f"target.cache_dir {str(blocker / 'cache')!r} cannot be written") and "not a directory" in msg
    ok = tmp_path / "writable"
    assert validate_cfg(make(f"target.cache_dir={ok}")).target.cache_dir == str(ok)
    # read-only: refused while empty, accepted once the dequantized copy is there
    ml = models
    monkeypatch.setattr(ml.os, "access", lambda path, mode: False)
    ok.mkdir()
    assert "not writable" in one_line_error(f"target.cache_dir={ok}")
    pm = ml.packaged("qwen2.5-coder-1.5b")
    hit = ml.gguf_cache_path(pm.gguf_name, pm.size, ok, ml.DTYPES["bfloat16"])
    hit.mkdir(parents=True)
    (hit / "config.json").write_text("{}")
    # the 0.5B draft has its own spec: pointed at the same read-only directory, it is refused by its name
    assert "levels.small.model.cache_dir" in one_line_error(
        f"target.cache_dir={ok}", f"+levels.small.model.cache_dir={ok}"
    )
    assert validate_cfg(make(f"target.cache_dir={ok}", "levels.small=null")).target.cache_dir == str(ok)


@pytest.mark.parametrize("impl", ["flash_attention_2", "flash_attention_3", "flex_attention"])
def test_attention_kernels_the_tree_mask_was_not_checked_with_are_refused(hydra_ctx, no_model_loads, impl):
    msg = one_line_error(f"target.attn_implementation={impl}")
    assert f"attn_implementation {impl!r} is refused" in msg and "['sdpa', 'eager']" in msg


def test_an_unexpected_error_is_one_line_and_a_traceback_file(tmp_path, monkeypatch):
    """Outside Hydra the traceback goes to a temporary file; the message names it."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(CliError) as e:
        with entry_errors():
            raise RuntimeError("boom\nsecond line")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("error: RuntimeError: boom ... (full traceback: ")
    path = Path(msg.rsplit("(full traceback: ", 1)[1].rstrip(")"))
    assert path.parent == tmp_path and "Traceback" in path.read_text() and "second line" in path.read_text()
    with pytest.raises(CliError, match="^error: bad$"):
        with entry_errors():
            raise ConfigError("bad")
    with pytest.raises(KeyboardInterrupt):
        with entry_errors():
            raise KeyboardInterrupt


@pytest.mark.parametrize("bad", ["0", "-1", "1.5", "true", "x"])
def test_repeats_is_checked_before_any_model_loads(hydra_ctx, bad):
    assert validate_cfg(make("experiment=tiny", "repeats=3"), with_data=False).repeats == 3
    with pytest.raises(ConfigError, match=r"repeats must be an integer >= 1, got"):
        validate_cfg(make("experiment=tiny", f"repeats={bad}"), with_data=False)


def test_a_bad_prediction_source_is_refused_before_any_model_loads(hydra_ctx):
    plan = validate_cfg(make("experiment=tiny", "prediction.source=training"), with_data=False)
    assert plan.prediction_source == "training"
    with pytest.raises(ConfigError, match=r"prediction.source must be one of \['heldout', 'training'\], got 'data'"):
        validate_cfg(make("experiment=tiny", "prediction.source=data"), with_data=False)


def test_the_llama_cpp_backend_is_refused_before_loading_when_it_cannot_run(hydra_ctx, no_model_loads, monkeypatch):
    """target.backend: an unknown name, a source with no GGUF, missing bindings and a feature
    draft (it reads hidden states llama.cpp does not return), each one line before loading."""
    from stagedspec.models import llama_cpp_model

    assert "unknown backend 'ggml'" in one_line_error("target.backend=ggml")
    assert "source 'tiny' has none" in one_line_error("experiment=tiny", "target.backend=llama_cpp")

    def missing():
        raise RuntimeError("target.backend=llama_cpp needs llama-cpp-python (ImportError: no llama_cpp); pip ...")

    monkeypatch.setattr("stagedspec.app.plan.bindings", missing)
    assert one_line_error("target.backend=llama_cpp").startswith("target.backend: target.backend=llama_cpp needs")
    monkeypatch.setattr("stagedspec.app.plan.bindings", lambda: llama_cpp_model)
    assert validate_cfg(make("target.backend=llama_cpp")).target.backend == "llama_cpp"
    msg = one_line_error(
        "stack=smollm2",
        "target.backend=llama_cpp",
        "levels.ngram=null",
        "levels.small=null",
        "+drafter@levels.feat=feature",
    )
    assert "returns no hidden states" in msg


def test_device_cuda_alone_turns_the_cpu_only_defaults_off(hydra_ctx, monkeypatch, no_model_loads):
    """The packaged pair's CPU-only settings follow ``device`` (``${cpu_else:...}``): on cuda the
    target's weights are dense and the 0.5B has no 4-bit rows, and that validates (CUDA faked);
    set by hand on cuda they are still refused, naming the fix."""
    import torch

    cpu = make()
    assert cpu.target.weights == "gguf_native" and cpu.levels.small.model.weights == "requant_q4k"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cuda = make("device=cuda")
    assert cuda.target.weights == "dense" and cuda.levels.small.model.weights == "dense"
    validate_cfg(cuda)
    with pytest.raises(ConfigError, match=r"weights='gguf_native'.*'cuda'.*set weights=dense"):
        validate_cfg(make("device=cuda", "target.weights=gguf_native"))
    with pytest.raises(ConfigError, match=r"int4_rows=2 runs a CPU kernel only.*set int4_rows=0"):
        validate_cfg(make("device=cuda", "levels.small.int4_rows=2"))
    with pytest.raises(ConfigError, match=r"weights='requant_q4k' runs a CPU kernel; the model is on 'cuda'"):
        validate_cfg(make("device=cuda", "levels.small.model.weights=requant_q4k"))
    with pytest.raises(ConfigError, match=r"int4_rows=2 and model.weights='requant_q4k' are two 4-bit paths"):
        validate_cfg(make("levels.small.int4_rows=2"))
    with pytest.raises(ConfigError, match=r"target.weights='requant_q4k' re-encodes the weights.*only a draft level"):
        validate_cfg(make("target.weights=requant_q4k"))
