"""The peers benchmark without the embedded model: the measurement loop's schedule and resume
(``stagedspec/evaluation/bench_log.py``), the table's arithmetic on hand-made numbers
(``bench_table.py``), one real run on tiny models (``bench_methods.py``), and the script
``experiments/peers.py`` over them."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from stagedspec.evaluation import bench_log, bench_methods, bench_table

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("peers_under_test", ROOT / "experiments" / "peers.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


peers = _load()


class FakeClock:
    """Time that moves only when a fake method "works": deterministic seconds."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def fake_methods(clock: FakeClock, calls: list):
    """hf: 1 s per token; fast: 0.5 s per token at batch 1, 0.75 s per step at batch 2;
    wrong: fast but its outputs differ from hf's on prompt 1."""

    def make(name, per_token, differs=False):
        def run(prompts, n, seed):
            calls.append((name, len(prompts), n, seed))
            outs = [[(sum(p) + j) % 97 for j in range(n)] for p in prompts]
            if differs:
                outs = [o if p[0] != 11 else [o[0] + 1] + o[1:] for p, o in zip(prompts, outs)]
            # exact binary fractions: the seconds do not depend on where the clock stood
            clock.t += per_token * n * ((1 + len(prompts)) / 2 if name != "hf" else len(prompts))
            res = {"outputs": outs}
            if name != "hf":
                res.update(
                    target_calls=n // 2,
                    target_forward_time=0.25 * n,
                    rounds=(n // 2) * len(prompts),
                    drafted=4.0 * n,
                    accepted=2.0 * n,
                )
            return res

        return run

    return {"hf": make("hf", 1.0), "fast": make("fast", 0.5), "wrong": make("wrong", 0.5, differs=True)}


PROMPTS = [[10, 1], [11, 2], [12, 3], [13, 4], [14, 5]]
CATS = ["a", "b", "a", "b", "a"]
BATCHES = {"hf": [1], "fast": [1, 2], "wrong": [1, 2]}


def run(path, limit=None, repeats=2, calls=None):
    clock = FakeClock()
    calls = [] if calls is None else calls
    recs = bench_log.run_measurements(
        fake_methods(clock, calls),
        BATCHES,
        PROMPTS,
        6,
        [1, 2],
        repeats,
        path,
        "cfg",
        limit=limit,
        clock=clock,
        log=lambda s: None,
    )
    return recs, calls


def test_schedule_interleaves_and_rotates():
    cells = bench_log.schedule(BATCHES, 5, [1, 2], 2)
    assert len(cells) == 2 * (5 * 3 + 3 * 2)  # 5 prompts x 3 methods at B=1, 3 pairs x 2 methods at B=2
    first = [c.method for c in cells[:6]]
    assert first == ["hf", "fast", "wrong", "fast", "wrong", "hf"]  # rotated by one per prompt
    rep1 = [c for c in cells if c.repeat == 1 and c.batch == 1 and c.group == 0]
    assert [c.method for c in rep1] == ["fast", "wrong", "hf"]  # and by one per repeat
    assert [c.prompts for c in cells if c.batch == 2 and c.repeat == 0 and c.method == "fast"] == [(0, 1), (2, 3), (4,)]
    assert {c.batch for c in cells if c.method == "hf"} == {1}


def test_resume_after_a_kill_gives_the_same_table_and_no_duplicates(tmp_path):
    full, _ = run(tmp_path / "full.jsonl")
    path = tmp_path / "resumed.jsonl"
    first, calls1 = run(path, limit=7)
    assert len(first) == 7
    with path.open("a") as f:
        f.write('{"config": "cfg", "method": "fa')  # a kill mid-write: a torn last line
    resumed, calls2 = run(path)
    keys = [bench_log.record_key(r) for r in resumed]
    assert len(keys) == len(set(keys)) == len(full) == 42
    assert len([c for c in calls2 if c[2] == 6]) == 42 - 7  # done cells are not measured again
    again, calls3 = run(path)  # nothing left: no method is even warmed up
    assert len(again) == 42 and calls3 == []
    on_disk = bench_log.read_measurements(path, "cfg")
    assert len(on_disk) == 42 and bench_log.read_measurements(path, "other") == []
    # the order of a resumed run is the schedule's, the cells done before skipped
    order = [bench_log.record_key(r) for r in on_disk]
    assert order == [c.key for c in bench_log.schedule(BATCHES, 5, [1, 2], 2)]
    t_full = bench_table.summarize(full, CATS, greedy=True, min_s_per_call=0.1)
    t_res = bench_table.summarize(resumed, CATS, greedy=True, min_s_per_call=0.1)
    assert t_full == t_res
    assert bench_table.markdown(t_full) == bench_table.markdown(t_res)


def test_repeat_r_on_prompt_i_runs_every_method_with_seed_plus_r_plus_a_stride_per_prompt(tmp_path):
    calls = []
    recs = bench_log.run_measurements(
        fake_methods(FakeClock(), calls),
        BATCHES,
        PROMPTS,
        6,
        [1, 2],
        3,
        tmp_path / "m.jsonl",
        "cfg",
        log=lambda s: None,
        seed=40,
    )
    by_cell = {bench_log.record_key(r): r["seed"] for r in recs}
    first = {bench_log.record_key(r): r["prompts"][0] for r in recs}
    assert len(by_cell) == 63 and all(seed == 40 + key[3] + 1009 * first[key] for key, seed in by_cell.items())
    timed = [c for c in calls if c[2] == 6]  # the warm-ups run 8 tokens
    # prompts 0-4 at batch 1, groups (0, 1), (2, 3), (4,) at batch 2: first prompts 0-4
    assert sorted({c[3] for c in timed}) == [40 + r + 1009 * p for p in range(5) for r in range(3)]
    cells = bench_log.schedule(BATCHES, 5, [1, 2], 3)
    assert [c[3] for c in timed] == [40 + c.repeat + 1009 * c.prompts[0] for c in cells]


def test_sampled_runs_draw_from_the_seed_they_are_given():
    """HF (torch's global generator) and ours (the decoder's own) at T = 1 on a tiny
    target: the same seed gives the same tokens, whatever ran in between; another seed
    other tokens (16 tokens over a 128-token vocabulary at T = 1: a chance collision is
    negligible)."""
    import torch

    from stagedspec.drafters import KatzNgramDrafter
    from stagedspec.engine.sampling import SamplingConfig
    from tests.helpers import tiny_target

    target = tiny_target()
    p = [[5, 6, 7, 8, 5, 6, 7]]
    fns = {
        "hf": bench_methods.hf_fn(target.model, [], 1.0),
        "ngram>target": bench_methods.ours_fn(
            target,
            lambda: KatzNgramDrafter(target.vocab_size, k=3),
            SamplingConfig(temperature=1.0, seed=0),
            [],
            peers_plan(),
        ),
    }
    for name, fn in fns.items():
        a = fn(p, 16, 3)["outputs"]
        torch.rand(7)  # moves the global generator between the runs
        assert fn(p, 16, 3)["outputs"] == a, name
        assert fn(p, 16, 4)["outputs"] != a, name


def test_our_methods_keep_one_drafter_through_a_run_unless_fresh_ones_are_asked_for():
    """``ours_fn`` builds its drafter at the first run and keeps it (the runner's way: a router's
    statistics carry over), or builds one every run with ``keep=False``; outputs equal plain greedy
    either way, the kept drafter across batch sizes too."""
    from stagedspec.drafters import KatzNgramDrafter
    from stagedspec.engine.sampling import SamplingConfig
    from tests.helpers import tiny_target

    target = tiny_target()
    made = []

    def make():
        made.append(KatzNgramDrafter(target.vocab_size, k=3))
        return made[-1]

    kept = bench_methods.ours_fn(target, make, SamplingConfig(), [], peers_plan())
    fresh = bench_methods.ours_fn(target, make, SamplingConfig(), [], peers_plan(), keep=False)
    plain = bench_methods.ours_fn(target, lambda: None, SamplingConfig(), [], peers_plan())
    prompts = [[5, 6, 7, 8, 5, 6, 7], [9, 10, 11, 9, 10]]
    want = plain(prompts, 8, 0)["outputs"]
    assert kept(prompts, 8, 0)["outputs"] == want and kept(prompts[:1], 8, 0)["outputs"] == want[:1]
    assert len(made) == 1
    assert fresh(prompts, 8, 0)["outputs"] == want and fresh(prompts, 8, 0)["outputs"] == want
    assert len(made) == 3 and len({id(d) for d in made}) == 3


def test_more_repeats_resume_the_same_measurements(tmp_path):
    path = tmp_path / "m.jsonl"
    run(path, repeats=1)
    recs, calls = run(path, repeats=2)
    assert len(recs) == 42 and len([c for c in calls if c[2] == 6]) == 21
    fewer, calls = run(path, repeats=1)  # the table of a smaller schedule has only its cells
    assert len(fewer) == 21 and {r["repeat"] for r in fewer} == {0} and calls == []


def test_table_arithmetic_on_hand_made_numbers():
    def rec(method, batch, prompts, repeat, tokens, seconds, outputs=None, **kw):
        return {
            "config": "c",
            "method": method,
            "batch": batch,
            "group": prompts[0] // batch,
            "prompts": prompts,
            "repeat": repeat,
            "tokens": tokens,
            "seconds": seconds,
            "outputs": outputs or [[1, 2]] * len(prompts),
            **kw,
        }

    ours = dict(target_calls=5, target_forward_time=0.5, prefill_seconds=0.05, rounds=5, drafted=8.0, accepted=6.0)
    records = [
        # HF: prompt 0 at 10 tok/s (repeats 1 s, 1 s), prompt 1 at 5 tok/s (2 s, 2 s)
        rec("hf", 1, [0], 0, 10, 1.0),
        rec("hf", 1, [0], 1, 10, 1.0),
        rec("hf", 1, [0], 2, 10, 1.0),
        rec("hf", 1, [1], 0, 10, 2.0),
        rec("hf", 1, [1], 1, 10, 2.0),
        # ours: prompt 0 at 20, 40, 25 tok/s (median 25, mean 28.3 -> ratio 2.5), prompt 1 at 2.5 (ratio 0.5)
        rec("x", 1, [0], 0, 10, 0.5, **ours),
        rec("x", 1, [0], 1, 10, 0.25, **ours),
        rec("x", 1, [0], 2, 10, 0.4, **ours),
        rec("x", 1, [1], 0, 10, 4.0, outputs=[[9]], **ours),
        rec("x", 1, [1], 1, 10, 4.0, **ours),
        # batch 2: 20 tokens in 1 s vs HF's 20 tokens in 3 s -> ratio 3
        rec("x", 2, [0, 1], 0, 20, 1.0, **ours),
    ]
    t = bench_table.summarize(records, ["a", "b"], greedy=True, min_s_per_call=0.01)
    rows = {(r["method"], r["batch"]): r for r in t["overall"]}
    x = rows[("x", 1)]
    assert x["speedup_vs_hf"] == pytest.approx(math.sqrt(2.5 * 0.5))
    assert x["ci"][0] <= x["speedup_vs_hf"] <= x["ci"][1]
    assert x["tokens_per_s"] == pytest.approx(50 / 9.15)
    assert x["decode_tokens_per_s"] == pytest.approx(50 / (9.15 - 5 * 0.05))  # the prefill left out
    assert x["tokens_per_call"] == pytest.approx(50 / 25)
    assert x["acceptance"] == pytest.approx(0.75)
    assert x["s_per_target_call"] == pytest.approx(0.1)
    assert x["min_s_per_target_call"] == 0.01
    assert x["differing_outputs"] == 1  # prompt 1's repeat 0
    hf = rows[("hf", 1)]
    assert hf["speedup_vs_hf"] == pytest.approx(1.0) and hf["differing_outputs"] == 0
    assert hf["tokens_per_call"] is None and hf["acceptance"] is None and hf["s_per_target_call"] is None
    assert hf["decode_tokens_per_s"] is None  # HF times generate whole: no prefill to leave out
    b2 = rows[("x", 2)]
    assert b2["speedup_vs_hf"] == pytest.approx(3.0) and b2["tokens_per_s"] == pytest.approx(20.0)
    assert b2["tokens_per_call"] == pytest.approx(20 / 5)
    # per category: batch 1 only, one prompt each
    assert [(r["method"], r["batch"]) for r in t["a"]] == [("hf", 1), ("x", 1)]
    assert t["a"][1]["speedup_vs_hf"] == pytest.approx(2.5)
    assert t["b"][1]["speedup_vs_hf"] == pytest.approx(0.5)
    # sampled: no output comparison
    assert bench_table.summarize(records, ["a", "b"], greedy=False)["overall"][1]["differing_outputs"] is None
    # sampled with the same tokens per seed (gumbel): repeat by repeat against the reference's own repeat
    same = [*records, rec("hf", 1, [1], 2, 10, 2.0, outputs=[[7]]), rec("x", 1, [1], 2, 10, 4.0, outputs=[[7]], **ours)]
    paired = {
        (r["method"], r["batch"]): r
        for r in bench_table.summarize(same, ["a", "b"], False, same_samples=True)["overall"]
    }
    assert paired[("x", 1)]["differing_outputs"] == 1  # prompt 1: repeat 0 differs, repeat 2 agrees on [7]
    same[-1] = rec("x", 1, [1], 2, 10, 4.0, **ours)  # repeat 2 now [1, 2] against HF's [7]
    same[3] = rec("hf", 1, [1], 0, 10, 2.0, outputs=[[9]])  # repeat 0 agrees now
    paired = {
        (r["method"], r["batch"]): r
        for r in bench_table.summarize(same, ["a", "b"], False, same_samples=True)["overall"]
    }
    assert paired[("x", 1)]["differing_outputs"] == 1 and paired[("hf", 1)]["differing_outputs"] == 0
    same[-1] = rec("x", 1, [1], 2, 10, 4.0, outputs=[[7]], **ours)
    paired = {
        (r["method"], r["batch"]): r
        for r in bench_table.summarize(same, ["a", "b"], False, same_samples=True)["overall"]
    }
    assert paired[("x", 1)]["differing_outputs"] == 0
    md = bench_table.markdown(t)
    assert "| x | 1 | 5.5 | 5.6 | 1.12 [" in md and "| 1/2 |" in md and "| hf | 1 | 7.1 |  | 1.00 [" in md


def test_speedup_is_the_geometric_mean_of_per_prompt_ratios():
    """Two prompts, ours 2x and 8x HF's tokens/s: 4x (the arithmetic mean and the ratio
    of pooled rates would say 5x); acceptance and tokens per call pool the records
    (14 / 40 = 0.35, not the mean of 0.8 and 0.2)."""

    def rec(method, prompt, tokens, seconds, **kw):
        return {
            "config": "c",
            "method": method,
            "batch": 1,
            "group": prompt,
            "prompts": [prompt],
            "repeat": 0,
            "tokens": tokens,
            "seconds": seconds,
            "outputs": [[1]],
            **kw,
        }

    records = [
        rec("hf", 0, 10, 1.0),
        rec("hf", 1, 10, 1.0),
        rec("x", 0, 20, 1.0, rounds=10, drafted=10.0, accepted=8.0, target_calls=10, target_forward_time=0.5),
        rec("x", 1, 80, 1.0, rounds=20, drafted=30.0, accepted=6.0, target_calls=20, target_forward_time=0.5),
    ]
    t = bench_table.summarize(records, ["a", "a"], greedy=True)
    x = t["overall"][1]
    assert x["method"] == "x" and x["speedup_vs_hf"] == pytest.approx(4.0)
    assert x["ci"] == pytest.approx([2.0, 8.0])  # two prompts: the bootstrap's extremes are 2 and 8
    assert x["acceptance"] == pytest.approx(14 / 40) and x["tokens_per_call"] == pytest.approx(100 / 30)
    assert x["tokens_per_s"] == pytest.approx(50.0) and x["s_per_target_call"] == pytest.approx(1 / 30)
    assert t["a"][1]["speedup_vs_hf"] == pytest.approx(4.0)


def test_a_real_run_on_tiny_models(tmp_path):
    """HF generate and our decoders on a tiny random Llama, through the same loop: ours
    equal HF greedy at batch 1 and 2."""
    from stagedspec.drafters import KatzNgramDrafter
    from stagedspec.engine.sampling import SamplingConfig
    from tests.helpers import tiny_target

    target = tiny_target()
    prompts = [[5, 6, 7, 8, 5, 6, 7], [9, 10, 11, 9, 10], [3, 4, 3, 4, 3]]
    methods = {
        "hf": bench_methods.hf_fn(target.model, [], 0.0),
        "ar": bench_methods.ours_fn(target, lambda: None, SamplingConfig(), [], peers_plan()),
        "ngram>target": bench_methods.ours_fn(
            target, lambda: KatzNgramDrafter(target.vocab_size, k=3), SamplingConfig(), [], peers_plan()
        ),
    }
    batches = {"hf": [1], "ar": [1, 2], "ngram>target": [1, 2]}
    recs = bench_log.run_measurements(
        methods, batches, prompts, 8, [1, 2], 1, tmp_path / "m.jsonl", "h", log=lambda s: None
    )
    t = bench_table.summarize(recs, ["c"] * 3, greedy=True, min_s_per_call=1e-4)
    rows = {(r["method"], r["batch"]): r for r in t["overall"]}
    assert set(rows) == {("hf", 1), ("ar", 1), ("ar", 2), ("ngram>target", 1), ("ngram>target", 2)}
    for (m, b), r in rows.items():
        assert r["differing_outputs"] == 0, (m, b)
        assert r["groups"] == (3 if b == 1 else 2)  # prompts (0,), (1,), (2,); pairs (0, 1), (2,)
        assert r["ci"][0] <= r["speedup_vs_hf"] <= r["ci"][1]
    assert rows[("hf", 1)]["speedup_vs_hf"] == pytest.approx(1.0) and rows[("hf", 1)]["ci"] == pytest.approx([1, 1])
    assert rows[("ar", 1)]["tokens_per_call"] == pytest.approx(1.0)
    assert rows[("ar", 1)]["acceptance"] is None  # no draft level: nothing drafted
    for b in (1, 2):  # pooled over the records: accepted / drafted of the n-gram level
        recs_b = [x for x in recs if x["method"] == "ngram>target" and x["batch"] == b]
        drafted, accepted = sum(x["drafted"] for x in recs_b), sum(x["accepted"] for x in recs_b)
        assert drafted > 0 and rows[("ngram>target", b)]["acceptance"] == pytest.approx(accepted / drafted)
    lines = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert all(x["tokens"] == 8 * len(x["prompts"]) for x in lines)


def peers_plan():
    from stagedspec.engine.kernels import HF_KERNELS

    return HF_KERNELS


def test_figure_from_results(tmp_path):
    from analysis.peers_figure import draw

    rows = [
        {"method": "hf", "batch": 1, "speedup_vs_hf": 1.0, "ci": [1.0, 1.0]},
        {"method": "ar", "batch": 2, "speedup_vs_hf": 1.5, "ci": [1.2, 1.8]},
        {"method": "bad", "batch": 1, "speedup_vs_hf": float("nan"), "ci": [float("nan")] * 2},
    ]
    res = tmp_path / "results.json"
    res.write_text(json.dumps({"args": {"data": "mt_bench"}, "tables": {"overall": rows}}))
    png = draw(res)
    assert png == tmp_path / "peers.png" and png.stat().st_size > 1000


def test_hf_methods_on_a_tiny_target_with_a_layers_draft(tmp_path):
    """The HF peers as peers.py builds them: assisted generation with a saved layers draft
    (the schedule asked for, HF's defaults filled in), prompt lookup, early exit; greedy
    they all give HF generate's tokens; a missing layers file is a skip with its reason."""
    import argparse

    import torch

    from stagedspec.models.draft_files import build_draft, save_draft
    from tests.helpers import tiny_target

    target = tiny_target()
    save_draft(build_draft(target.model, "layers", 1, torch.arange(target.vocab_size)), tmp_path / "layers.safetensors")
    files = {k: tmp_path / f"{k}.safetensors" for k in ("feature", "layers", "ngram")}
    args = argparse.Namespace(temperature=0.0, assistant_schedule="heuristic", prompt_lookup=10, early_exit=1)
    made, skipped, info = bench_methods.hf_methods(args, target.model, target.name, files, [])
    assert set(made) == {"hf", "hf_assisted_layers", "hf_prompt_lookup", "hf_early_exit"}, skipped
    settings = bench_methods.assistant_settings(info["assistant"])
    assert settings["num_assistant_tokens_schedule"] == "heuristic"
    assert settings["num_assistant_tokens"] is not None and settings["assistant_confidence_threshold"] is not None
    p = [[5, 6, 7, 8, 5, 6, 7]]
    want = made["hf"](p, 6, 0)["outputs"]
    for name, fn in made.items():
        assert fn(p, 6, 0)["outputs"] == want, name
    made, skipped, _ = bench_methods.hf_methods(
        args, target.model, target.name, {**files, "layers": tmp_path / "none"}, []
    )
    assert "hf_assisted_layers" not in made and "no layers draft" in skipped["hf_assisted_layers"]


def test_the_script_is_thin_over_the_shared_bench_code():
    assert peers.run_measurements is bench_log.run_measurements and peers.summarize is bench_table.summarize
    args = peers.parse_args([])
    assert (args.data, args.prompts, args.repeats, args.batch_sizes) == ("mt_bench", 8, 3, "1,2,4,8")


def test_split_option_defaults_to_test_and_keys_the_measurements():
    """--split picks the prompts (test by default); dev and test hash apart, and all hashes
    as a run from before splits (no split in the key), so its measurements still resume."""
    assert peers.parse_args([]).split == "test" and peers.parse_args(["--split", "dev"]).split == "dev"
    with pytest.raises(SystemExit):
        peers.parse_args(["--split", "train"])
    hashes = {s: peers.config_hash(peers.parse_args(["--split", s]), {}) for s in ("dev", "test", "all")}
    assert len(set(hashes.values())) == 3
    before = peers.parse_args(["--split", "all"])
    del before.split
    assert peers.config_hash(before, {}) == hashes["all"]


def test_parse_ours_reads_model_levels_with_stop_and_alternatives():
    got = bench_methods.parse_ours("ar, q4:12:50:2, ngram:1>q4:12:50>copy:24:6, ngram:1:30>q4:12")
    assert got == {
        "ar": [],
        "q4:12:50:2": [("q4", [12, 50, 2])],
        "ngram:1>q4:12:50>copy:24:6": [("ngram", [1]), ("q4", [12, 50]), ("copy", [24, 6])],
        "ngram:1:30>q4:12": [("ngram", [1, 30]), ("q4", [12])],
    }
    for bad in (
        "q4:12:50:9",
        "q4:12:100",
        "small:4:50:2:1",
        "lookup:4:2",
        "tree:3",
        "q4:0",
        "ngram:1:100",
        "ngram:1:30:2",
    ):
        with pytest.raises(SystemExit, match=f"bad level {bad!r}"):
            bench_methods.parse_ours(bad)


def test_parse_ours_reads_recycled_trees_alone_and_under_the_timed_router():
    got = bench_methods.parse_ours("recycle:3, ngram:1:30>n4:12:50:2>rtimed:24:6")
    assert got == {
        "recycle:3": [("recycle", [3])],
        "ngram:1:30>n4:12:50:2>rtimed:24:6": [("ngram", [1, 30]), ("n4", [12, 50, 2]), ("rtimed", [24, 6])],
    }
    # a recycle level learns from the target's calls: beside other levels it would never hear them
    for bad, part in (
        ("recycle:21", "recycle:21"),
        ("lookup:4>recycle:3", "recycle:3"),
        ("rtimed:24", "rtimed:24"),
        ("rtimed:24:21", "rtimed:24:21"),
    ):
        with pytest.raises(SystemExit, match=f"bad level {part!r}.*recycle:NODES alone"):
            bench_methods.parse_ours(bad)


def test_weights_give_each_of_our_methods_the_plan_with_or_without_its_4bit_rows():
    from stagedspec.engine.kernels import KernelChoice

    plan = KernelChoice(name="fast", linear=("mkldnn",) * 4, int4_rows=3, int4_exact=True)
    assert peers.weight_plans(plan, "gguf_q4") == {"": plan}
    both = peers.weight_plans(plan, "gguf_q4,dense")
    assert set(both) == {"", "@dense"} and both[""] is plan
    assert both["@dense"].int4_rows == 0 and both["@dense"].linear == plan.linear
    assert peers.weight_plans(plan, "dense")[""].int4_rows == 0
    with pytest.raises(SystemExit, match=r"--weights: 'q8'; valid: gguf_q4, dense, llama_cpp"):
        peers.weight_plans(plan, "q8")
    three = peers.weight_plans(plan, "gguf_q4,llama_cpp,dense")
    assert set(three) == {"", "@llama_cpp", "@dense"} and three["@llama_cpp"] is plan  # the drafts' plan
    assert peers.llama_cpp_suffix("gguf_q4,llama_cpp") == "@llama_cpp"
    assert peers.llama_cpp_suffix("llama_cpp") == "" and peers.llama_cpp_suffix("gguf_q4,dense") is None


def test_pair_methods_build_the_levels_the_string_names_with_percent_as_probability():
    """``ngram:1:30>q4:12:50:2>copy:24:6`` on a tiny pair: the n-gram drafts 1 token only
    where its top probability is >= 0.30, the model level k 12, stop_below 0.50, 2
    alternatives and 4-bit rows, the bypass k 24 and min_match 6, each over the level before."""
    from stagedspec.drafters import BypassDrafter, KatzNgramDrafter, ModelDrafter

    from tests.helpers import tiny_target

    target, small = tiny_target(), tiny_target(seed=1)
    made = bench_methods.pair_methods(target, small, "ar,ngram:1:30>q4:12:50:2>copy:24:6,small:8")
    assert set(made) == {"ar", "ngram:1:30>q4:12:50:2>copy:24:6", "small:8"} and made["ar"]() is None
    copy = made["ngram:1:30>q4:12:50:2>copy:24:6"]()
    assert isinstance(copy, BypassDrafter) and (copy.k, copy.min_match) == (24, 6)
    mid = copy.lower
    assert isinstance(mid, ModelDrafter) and mid.kv.model is small.model
    assert (mid.k, mid.stop_below, mid.stop_alternatives, mid.int4_rows) == (12, 0.5, 2, bench_methods.INT4_ROWS)
    assert isinstance(mid.lower, KatzNgramDrafter) and (mid.lower.k, mid.lower.min_top) == (1, 0.3)
    plain = made["small:8"]()
    assert (plain.k, plain.stop_below, plain.int4_rows, plain.lower) == (8, 0.0, 0, None)
    routed = bench_methods.pair_methods(target, small, "q4:12>route:24")["q4:12>route:24"]()
    assert isinstance(routed, BypassDrafter) and routed.prices is not None and (routed.k, routed.min_match) == (24, 1)


def test_hf_prompt_lookup_settings_reach_generate_and_the_assistant_restarts_each_prompt(monkeypatch):
    """``--prompt-lookup 10,20:3``: two methods whose generate() gets prompt_lookup_num_tokens
    and max_matching_ngram_size; an assistant's generation config is restored before every
    prompt (HF's heuristic schedule rewrites it after each call)."""
    import types

    settings = bench_methods.prompt_lookup_settings("10,20:3")
    assert settings == {
        "hf_prompt_lookup_10": {"prompt_lookup_num_tokens": 10},
        "hf_prompt_lookup_20_3": {"prompt_lookup_num_tokens": 20, "max_matching_ngram_size": 3},
    }
    assert bench_methods.prompt_lookup_settings(10) == {"hf_prompt_lookup": {"prompt_lookup_num_tokens": 10}}
    for bad in ("10:0", "a", "1:2:3", ""):
        with pytest.raises(SystemExit, match="--prompt-lookup"):
            bench_methods.prompt_lookup_settings(bad)
    assert bench_methods.constant_assistant_tokens("4,8,12") == [4, 8, 12]
    assert bench_methods.constant_assistant_tokens(8) == [8]
    assert bench_methods.constant_assistant_tokens("0") == []
    for bad in ("", "4,-1", "x", "4.5"):
        with pytest.raises(SystemExit, match="--assistant-tokens: bad value"):
            bench_methods.constant_assistant_tokens(bad)
    seen = []

    def fake_generate(model, prompt, n, eos=None, temperature=0.0, **kw):
        a = kw.get("assistant_model")
        seen.append(
            (
                dict((k, v) for k, v in kw.items() if k != "assistant_model"),
                a.generation_config.num_assistant_tokens if a is not None else None,
            )
        )
        if a is not None:  # what HF's heuristic schedule does after a call
            a.generation_config.num_assistant_tokens += 2
        return [1]

    monkeypatch.setattr(bench_methods, "hf_generate", fake_generate)
    fn = bench_methods.hf_fn(None, [], 0.0, **settings["hf_prompt_lookup_20_3"])
    fn([[1, 2], [3, 4]], 4, 0)
    assert seen == [({"prompt_lookup_num_tokens": 20, "max_matching_ngram_size": 3}, None)] * 2
    seen.clear()
    assistant = types.SimpleNamespace(generation_config=types.SimpleNamespace(num_assistant_tokens=20))
    fn = bench_methods.hf_fn(None, [], 0.0, assistant_model=assistant)
    fn([[1], [2]], 4, 0)
    fn([[3]], 4, 0)
    assert [n for _, n in seen] == [20, 20, 20]  # without the reset: 20, 22, 24


def test_constant_assistant_schedules_each_reach_generate_with_their_own_length(monkeypatch):
    """``--assistant-tokens 4,12``: two HF assisted methods on the same draft weights, each
    with a constant schedule of its own length and no confidence threshold, beside HF's
    heuristic one (whose config is left as it was)."""
    import types

    from transformers import GenerationConfig

    seen = []

    def fake_generate(model, prompt, n, eos=None, temperature=0.0, **kw):
        gc = kw["assistant_model"].generation_config if "assistant_model" in kw else None
        seen.append(None if gc is None else (gc.num_assistant_tokens_schedule, gc.num_assistant_tokens))
        return [1]

    monkeypatch.setattr(bench_methods, "hf_generate", fake_generate)
    draft = types.SimpleNamespace(generation_config=GenerationConfig(num_assistant_tokens=20))
    args = types.SimpleNamespace(
        temperature=0.0, assistant_schedule="heuristic", assistant_tokens="4,12", prompt_lookup="10"
    )
    made, skipped, _ = bench_methods.pair_hf_methods(args, None, draft, [])
    assert skipped == {}
    assert set(made) == {"hf", "hf_assisted", "hf_assisted_const4", "hf_assisted_const12", "hf_prompt_lookup"}
    seen.clear()
    for name in ("hf_assisted", "hf_assisted_const4", "hf_assisted_const12"):
        made[name]([[5, 6]], 4, 0)
    assert seen == [("heuristic", 20), ("constant", 4), ("constant", 12)]
