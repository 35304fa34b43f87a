"""Kernel plans: the choice from measured times, the cached calibration, Hugging Face's
path left untouched, and exact decoding through a fast plan (slot cache, GQA packing,
prepacked GEMMs) on tiny models and on the embedded SmolLM2."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from transformers import DynamicCache

from stagedspec.engine import kernels
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.int4_kernels import int4_quantize
from stagedspec.engine.kernels import HF_KERNELS, KernelChoice, available_paths, long_path_for
from stagedspec.tuning.kernel_calibration import COARSE_ROWS, choose_paths, calibrate, fill_rows
from stagedspec.engine.kv_cache import KVModel, SlotLayer
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import DraftTree, TreeShape
from stagedspec.engine.verification import verify_tree, verify_tree_greedy
from tests.helpers import hierarchy, tiny_target
from tests.oracles import N_NEW, hf_greedy, hf_reference, logits_by_row_count, tiny_prompts

PATHS = available_paths(torch.float32, torch.device("cpu"))
# every available path somewhere in 1..8 rows, so each one's dispatch code runs; prefills
# past 8 rows (prompts of up to 40 tokens) through a path other than F.linear
MIXED = KernelChoice(
    name="mixed",
    linear=tuple(PATHS[i % len(PATHS)] for i in range(8)),
    gqa_packing=True,
    slot_cache=True,
    lean_layers=True,
    long_path="mkldnn" if "mkldnn" in PATHS else "wxt",
)


@pytest.fixture(autouse=True)
def _home_cache_untouched(tmp_path_factory, monkeypatch):
    """Every calibration here goes to a test's own directory: one in the default cache
    (~/.cache/stagedspec/kernels) would replace this machine's production calibration
    with a quick one. HOME points at an empty directory that must stay empty."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("STAGEDSPEC_CACHE", raising=False)
    yield
    assert not any(home.iterdir()), f"a test wrote under the home cache: {sorted(home.rglob('*'))}"


def test_choose_takes_the_fastest_path_within_the_pack_budget():
    times = {
        "1": {"linear": 20.0, "mkldnn": 27.0, "mkl4": 21.0},
        "4": {"linear": 34.0, "mkldnn": 28.0, "mkl4": 27.0},
        "8": {"linear": 42.0, "mkldnn": 33.0, "mkl8": 32.0},
    }
    # one pack: mkldnn saves 6 + 9 = 15 ms, mkl4 saves 7, mkl8 saves 10 -> mkldnn
    assert choose_paths(times, max_packs=1) == ["linear", "mkldnn", "mkldnn"]
    # two packs: after mkldnn, mkl4 and mkl8 each save 1 ms of 81 (over the 1% bar); the tie
    # goes to the first name
    assert choose_paths(times, max_packs=2) == ["linear", "mkl4", "mkldnn"]
    assert choose_paths(times, max_packs=0) == ["linear", "linear", "linear"]


def test_plan_describe_and_path_lookup():
    plan = KernelChoice(name="fast", linear=("linear",) * 3 + ("mkl4",) + ("mkldnn",) * 4, gqa_packing=True)
    assert plan.describe() == "fast: 1-3 linear, 4 mkl4, 5-8 mkldnn; gqa packing"
    assert plan.path(4) == "mkl4" and plan.path(8) == "mkldnn" and plan.path(50) == "linear"
    assert HF_KERNELS.bitwise_hf and not plan.bitwise_hf
    long = KernelChoice(name="fast", linear=("mkldnn",) * 2, long_path="mkldnn")
    assert long.path(3) == "mkldnn" and long.describe() == "fast: 1-2 mkldnn, 3+ mkldnn"
    assert not KernelChoice(linear=("linear",), long_path="mkldnn").bitwise_hf


def test_rows_past_the_table_take_the_last_path_that_runs_any_row_count():
    assert long_path_for(["linear", "mkldnn"]) == "mkldnn"
    assert long_path_for(["mkldnn", "wxt"]) == "wxt"
    assert long_path_for(["mkldnn", "linear"]) == "linear"
    assert long_path_for(["mkldnn", "mkl16"]) == "linear"  # packed for 16 rows only
    assert long_path_for([]) == "linear"


def test_calibration_is_cached_per_machine_and_model(tmp_path):
    model = tiny_target().model
    plan, cal = calibrate(model, max_rows=4, reps=1, cache_dir=tmp_path)
    assert len(plan.linear) == 4 and set(plan.linear) <= set(PATHS)
    assert plan.long_path == long_path_for(plan.linear)
    assert sorted(cal.times_ms, key=int) == ["1", "2", "3", "4"]
    for row, per_path in cal.times_ms.items():  # the chosen path is the fastest allowed one
        allowed = set(plan.linear) | {"linear"}
        best = min((p for p in per_path if p in allowed), key=per_path.get)
        assert plan.linear[int(row) - 1] == best
    (f,) = (tmp_path / "kernels").glob("*.json")
    saved = json.loads(f.read_text())
    assert saved["key"]["threads"] == torch.get_num_threads() and saved["key"]["dtype"] == "float32"
    plan2, cal2 = calibrate(model, max_rows=4, reps=1, cache_dir=tmp_path)
    assert plan2 == plan and cal2.times_ms == cal.times_ms  # read back, not re-measured


def test_row_counts_left_untimed_take_the_line_between_their_timed_neighbours():
    times = {"1": {"linear": 10.0, "wxt": 12.0}, "2": {"linear": 20.0}, "5": {"linear": 50.0, "wxt": 35.0}}
    got = fill_rows(times, 6)
    assert got["3"] == {"linear": 30.0} and got["4"] == {"linear": 40.0}  # wxt not timed at 2: not guessed
    assert got["1"] == times["1"] and got["5"] == times["5"] and "6" not in got  # nothing past the last timed
    assert fill_rows(times, 6) is not times and times["2"] == {"linear": 20.0}


def test_slow_passes_are_timed_at_the_coarse_row_counts_only(tmp_path):
    """A pass at least ``slow_pass_ms`` long from 8 rows on (here every pass: 0 ms) leaves the row counts
    past 8 outside ``COARSE_ROWS`` untimed, filled in on a line; every row count still has a plan."""
    model = tiny_target().model
    plan, cal = calibrate(model, max_rows=20, reps=1, cache_dir=tmp_path, slow_pass_ms=0.0)
    assert sorted(cal.times_ms, key=int) == [str(m) for m in range(1, 21)] and len(plan.linear) == 20
    for m in (9, 10, 11):  # between 8 and 12, both timed
        for q, t in cal.times_ms[str(m)].items():
            lo, hi = cal.times_ms["8"][q], cal.times_ms["12"][q]
            assert t == pytest.approx(lo + (hi - lo) * (m - 8) / 4)
    assert {8, 12, 16} <= set(COARSE_ROWS) and 20 not in COARSE_ROWS  # 17-19: the line from 16 to 20 (the last)
    t16, t20 = cal.times_ms["16"]["linear"], cal.times_ms["20"]["linear"]
    assert cal.times_ms["18"]["linear"] == pytest.approx((t16 + t20) / 2)
    _, quick = calibrate(model, max_rows=20, reps=1, cache_dir=tmp_path)  # the default threshold: its own entry
    assert quick.key.get("slow_pass_ms") is None and cal.key["slow_pass_ms"] == 0.0


def test_calibrations_differing_only_in_reps_or_name_do_not_share_an_entry(tmp_path):
    """A quick calibration (reps=1, as tests run it) must never be read back as a full
    one, nor a plan cached under another name."""
    model = tiny_target().model
    calibrate(model, max_rows=2, reps=1, cache_dir=tmp_path)
    _, full = calibrate(model, max_rows=2, reps=2, cache_dir=tmp_path)
    plan, _ = calibrate(model, max_rows=2, reps=1, cache_dir=tmp_path, name="other")
    saved = sorted(json.loads(f.read_text())["key"]["reps"] for f in (tmp_path / "kernels").glob("*.json"))
    assert saved == [1, 1, 2] and full.key["reps"] == 2 and plan.name == "other"


def test_a_calibration_made_by_an_older_procedure_is_not_read_back(tmp_path, monkeypatch):
    from stagedspec.tuning import kernel_calibration

    model = tiny_target().model
    _, new = calibrate(model, max_rows=2, reps=1, cache_dir=tmp_path)
    monkeypatch.setattr(kernel_calibration, "CALIBRATION_VERSION", kernel_calibration.CALIBRATION_VERSION - 1)
    _, old = calibrate(model, max_rows=2, reps=1, cache_dir=tmp_path)
    versions = sorted(json.loads(f.read_text())["key"]["version"] for f in (tmp_path / "kernels").glob("*.json"))
    assert versions == [old.key["version"], new.key["version"]] and old.key["version"] < new.key["version"]


def test_default_cache_dir_is_under_home(tmp_path, monkeypatch):
    """The autouse fixture's HOME is where the default cache goes (so its check means
    something), and $STAGEDSPEC_CACHE moves it."""
    import os

    model = tiny_target().model
    calibrate(model, max_rows=1, reps=1, cache_dir=tmp_path)  # warm: packs made
    monkeypatch.setenv("STAGEDSPEC_CACHE", str(tmp_path / "env"))
    calibrate(model, max_rows=1, reps=1)
    assert len(list((tmp_path / "env" / "kernels").glob("*.json"))) == 1
    monkeypatch.delenv("STAGEDSPEC_CACHE")
    calibrate(model, max_rows=1, reps=1)
    home = Path(os.environ["HOME"])
    written = list((home / ".cache" / "stagedspec" / "kernels").glob("*.json"))
    assert len(written) == 1
    shutil.rmtree(home / ".cache")  # HOME empty again for the fixture's own check


def test_install_leaves_hf_generate_bitwise_unchanged():
    target = tiny_target(seed=5)
    prompt = tiny_prompts(2)[1]
    before = hf_greedy(target.model, prompt, 30)
    with torch.no_grad():
        logits_before = target.model(torch.tensor([prompt])).logits
    kernels.install(target.model)
    assert target.model.config._attn_implementation == kernels.ATTN_NAME
    assert hf_greedy(target.model, prompt, 30) == before
    with torch.no_grad():
        assert torch.equal(target.model(torch.tensor([prompt])).logits, logits_before)


@pytest.mark.parametrize("kind", ["ngram", "small", "ngram>small", "ngram>other>small"])
def test_fast_plan_greedy_equals_hf_on_tiny_models(kind):
    target = tiny_target()
    ref = [list(r) for r in hf_reference(3)]
    for k in (1, 3, 8):
        dec = SpeculativeDecoder(target.model, hierarchy(kind, target, k), SamplingConfig(), plan=MIXED)
        assert [s.output_ids for s in dec.generate(tiny_prompts(3), N_NEW).sequences] == ref, f"{kind} k={k}"


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize(
    "kind,tree",
    [("ar", None), ("small", {"widths": [2, 2, 1]}), ("ngram", {"dynamic": {"budget": 8, "topk": 3, "depth": 4}})],
)
def test_fast_plan_batches_and_trees_equal_hf(batch, kind, tree):
    target = tiny_target()
    dec = SpeculativeDecoder(
        target.model, hierarchy(kind, target, 3, tree=TreeShape.parse(tree)), SamplingConfig(), plan=MIXED
    )
    res = dec.generate(tiny_prompts(8)[:batch], N_NEW)
    assert [s.output_ids for s in res.sequences] == [list(r) for r in hf_reference(8)][:batch]


def test_slot_cache_grows_rolls_back_and_drops_rows():
    """300 tokens through a mostly-rejecting hierarchy: the slot buffers pass their first
    capacity (256), roll back hundreds of times, and stay exact."""
    target = tiny_target()
    prompt = tiny_prompts(2)[1]
    ref = hf_greedy(target.model, prompt, 300)
    dec = SpeculativeDecoder(target.model, hierarchy("ngram>other>small", target, 6), SamplingConfig(), plan=MIXED)
    assert dec.generate([prompt], 300).sequences[0].output_ids == ref
    layer = dec.kv.cache.layers[0]
    assert isinstance(layer, SlotLayer) and layer._k.shape[2] >= 300


def test_fast_plan_tree_logits_equal_each_path_as_a_sequence():
    target = tiny_target()
    kv = KVModel(target.model, plan=MIXED)
    kv.reset(2)
    ctxs = [[5, 9, 3, 7, 7, 1], [4, 2]]
    kv.extend_chain(kv.sync([c[:-1] for c in ctxs]), want_last=False)
    tails = kv.sync(ctxs, min_tail=1)
    toks = [[11, 12, 13, 14], [21, 22, 23, 24]]
    parents = [-1, -1, 0, 2]  # two root children; a depth-3 branch under the first
    feed = [t + tk for t, tk in zip(tails, toks)]
    pars = [[-1] + [0 if q < 0 else 1 + q for q in parents] for _ in ctxs]
    logits = kv.extend(feed, pars, [list(range(1 + len(parents)))] * 2)
    paths = [[0], [1], [0, 2], [0, 2, 3]]
    for b, ctx in enumerate(ctxs):
        for i, path in enumerate(paths):
            with torch.no_grad():
                ref = target.model(torch.tensor([ctx + [toks[b][j] for j in path]])).logits[0, -1]
            torch.testing.assert_close(logits[b][i + 1], ref, atol=1e-5, rtol=1e-5)


# a fast plan as calibration makes them: another GEMM path at 4 rows than at 1
FAST4 = KernelChoice(
    name="fast4",
    linear=("linear",) * 3 + (next(p for p in ("mkl4", "mkldnn", "wxt") if p in PATHS),),
    gqa_packing=True,
    slot_cache=True,
    lean_layers=True,
)


@pytest.mark.parametrize("plan", [HF_KERNELS, FAST4, MIXED], ids=["hf", "fast4", "mixed"])
def test_logits_depend_on_the_row_count_only_by_kernel_rounding(plan):
    """The docs' claim, checked: a position's logits from a 1-row forward (the baseline) and
    from a 4-row forward (verification) agree up to kernel rounding under every plan, HF's
    included (measured here, float32: HF 2.2e-7, fast 0.9-2.1e-7 absolute on logits of
    0.56; SmolLM2: HF 5.7e-5, fast 5.5e-5-1.1e-4 on logits of 30). Under the HF plan
    the 1-row logits are, bit for bit, Hugging Face's own cached decoding."""
    target = tiny_target()
    prefix, toks = [5, 9, 3, 7, 7, 1, 4, 2, 11, 13], [21, 22, 23, 24]
    single, multi = logits_by_row_count(target.model, plan, prefix, toks)
    assert float((single - multi).abs().max() / single.abs().max()) < 1e-4
    with torch.no_grad():  # HF's own: the prefix, then one token per forward through its cache
        cache = DynamicCache(config=target.model.config)
        target.model(torch.tensor([prefix]), cache=cache, use_cache=True)
        hf = torch.stack([target.model(torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1] for t in toks])
    if plan.bitwise_hf:
        assert torch.equal(single, hf)
    torch.testing.assert_close(single, hf, rtol=1e-4, atol=1e-4 * float(hf.abs().max()))


def _random_tree(rng: random.Random, vocab: int) -> DraftTree:
    tree = DraftTree()
    for _ in range(rng.randint(0, 9)):
        parent = rng.randint(-1, len(tree) - 1)
        tree.add(rng.randrange(vocab), parent, None, "x")
    return tree


def test_greedy_walk_equals_the_point_mass_rule():
    """``verify_tree_greedy`` on argmaxes == ``verify_tree`` on one-hot p, on random trees
    whose tokens often hit the argmax (vocabulary of 3)."""
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    for _ in range(500):
        tree = _random_tree(rng, 3)
        argmax = [rng.randrange(3) for _ in range(len(tree) + 1)]
        p = torch.zeros(len(tree) + 1, 3)
        p[torch.arange(len(argmax)), torch.tensor(argmax)] = 1.0
        assert verify_tree_greedy(tree, argmax) == verify_tree(tree, p, gen)


@pytest.mark.slow
def test_fast_plan_ar_and_speculation_agree_on_the_embedded_model(embedded_model, tmp_path):
    """Through one calibrated plan, plain decoding and speculation give the same tokens
    on real prompts (they share every kernel choice per row count)."""
    from stagedspec.drafters import KatzNgramDrafter, PromptLookupDrafter
    from stagedspec.models.chat_text import encode_prompt

    plan, _ = calibrate(embedded_model.model, reps=1, cache_dir=tmp_path)
    prompts = [
        encode_prompt(embedded_model.tokenizer, t)
        for t in (
            "Summarize: The cat sat on the mat because the mat was warm and the sun was out.",
            "Write a Python function that returns the n-th Fibonacci number.",
        )
    ]
    ar = SpeculativeDecoder(embedded_model.model, None, SamplingConfig(), plan=plan).generate(prompts, 48)
    for drafter in (PromptLookupDrafter(k=4), KatzNgramDrafter(embedded_model.vocab_size, k=4)):
        spec = SpeculativeDecoder(embedded_model.model, drafter, SamplingConfig(), plan=plan).generate(prompts, 48)
        assert [s.output_ids for s in spec.sequences] == [s.output_ids for s in ar.sequences], drafter.name


def test_a_fast_plan_packs_its_weights_before_the_first_forward():
    """A plan read from the cache packs nothing; ``KVModel.set_plan`` packs every module
    for each prepacked path the plan uses (so no timed round pays for packing), and only
    those."""
    packed = [q for q in PATHS if q not in (kernels.PATH_LINEAR, kernels.PATH_WXT)]
    if not packed:
        pytest.skip("no prepacked GEMM path on this machine")
    plan = KernelChoice(name="one-pack", linear=(packed[0], kernels.PATH_LINEAR), lean_layers=True)
    target = tiny_target()
    kernels.install(target.model)
    mods = kernels.gemm_modules(target.model)
    for m in mods:  # the tiny model is shared between tests: forget what others packed
        m._stagedspec_packs.clear()
    KVModel(target.model, plan=plan)
    assert mods and all(set(m._stagedspec_packs) == {packed[0]} for m in mods)


# --------------------------------------------------------------------------- 4-bit draft weights
def test_int4_path_multiplies_by_the_dequantized_4bit_weight():
    """``PATH_INT4``: x times the weight rebuilt from its codes, q * scale + min per group
    of 32 input columns (computed here by hand from ``int4_quantize``); not x times the
    weight itself. A weight whose every group already lies on a 16-level grid reaching
    both ends (a Q4_K GGUF block does) comes back exact."""
    g = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(64, 48, bias=True)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(48, 64, generator=g))
        lin.bias.copy_(torch.randn(48, generator=g))
    lin._stagedspec_packs = {}
    x = torch.randn(2, 64, generator=g)
    q, scale, lo = int4_quantize(lin.weight)
    assert q.shape == (48, 64) and int(q.min()) == 0 and int(q.max()) == 15 and scale.shape == lo.shape == (2, 48)
    deq = (q.float().reshape(48, 2, 32) * scale.T[..., None] + lo.T[..., None]).reshape(48, 64)
    y = kernels.apply_path(lin, kernels.PATH_INT4, x)
    torch.testing.assert_close(y, x @ deq.T + lin.bias, atol=1e-4, rtol=1e-4)
    assert (y - torch.nn.functional.linear(x, lin.weight, lin.bias)).abs().max() > 1e-2  # really 4-bit

    on_grid = torch.nn.Linear(64, 16, bias=False)
    codes = torch.randint(0, 16, (16, 64), generator=g)
    codes[:, ::32], codes[:, 1::32] = 0, 15  # every group reaches both ends of its grid
    with torch.no_grad():
        on_grid.weight.copy_(codes * 0.25 - 1.0)
    on_grid._stagedspec_packs = {}
    torch.testing.assert_close(
        kernels.apply_path(on_grid, kernels.PATH_INT4, x),
        torch.nn.functional.linear(x, on_grid.weight),
        atol=1e-4,
        rtol=1e-4,
    )


def test_int4_draft_weights_keep_the_output_and_are_refused_for_the_target(monkeypatch):
    """A draft whose 1-2-row forwards take 4-bit weights (``int4_rows``) still gives the
    target's greedy output token for token (its q is its own; the verifier uses it); the
    4-bit path runs for the draft's modules only, and a target plan carrying it is
    refused (that would change the model being decoded)."""
    from stagedspec.drafters.model_drafter import ModelDrafter

    from tests.helpers import other_small

    target = tiny_target()
    ref = [list(r) for r in hf_reference(3)]
    draft = other_small(target.vocab_size)  # shares no module with the target
    calls: list[tuple[int, str]] = []
    real = kernels.apply_path
    monkeypatch.setattr(kernels, "apply_path", lambda mod, path, x: calls.append((id(mod), path)) or real(mod, path, x))
    for plan in (HF_KERNELS, MIXED):
        calls.clear()
        drafter = ModelDrafter(draft, k=3, int4_rows=3)  # 3 prompts: a draft step is 3 rows
        dec = SpeculativeDecoder(target.model, drafter, SamplingConfig(), plan=plan)
        assert [s.output_ids for s in dec.generate(tiny_prompts(3), N_NEW).sequences] == ref, plan.name
        assert drafter.kv.plan.int4_rows == 3 and "4-bit weights at 1-3 rows" in drafter.kv.plan.describe()

        def linears(model):  # HF's modules (the hf plan) and the lean layers' fused ones (the fast plans)
            return {id(m) for m in model.modules() if isinstance(m, torch.nn.Linear)} | {
                id(m) for m in kernels.gemm_modules(model)
            }

        int4 = {i for i, path in calls if path == kernels.PATH_INT4}
        assert int4 and int4 <= linears(draft) and not int4 & linears(target.model), plan.name
    assert not HF_KERNELS.for_draft(2).bitwise_hf and HF_KERNELS.for_draft(0) is HF_KERNELS
    assert (
        HF_KERNELS.for_draft(2).path(2) == kernels.PATH_INT4 and HF_KERNELS.for_draft(2).path(3) == kernels.PATH_LINEAR
    )
    assert HF_KERNELS.for_draft(2).path(1, int4_ok=False) == kernels.PATH_LINEAR
    with pytest.raises(ValueError, match=r"int4_rows=2.*only a draft level"):
        SpeculativeDecoder(target.model, None, SamplingConfig(), plan=MIXED.for_draft(2))


@pytest.mark.parametrize("bad", [-1, 33, 1.5, True, "2"])
def test_bad_int4_rows_is_refused_naming_the_value(bad):
    from stagedspec.drafters.hierarchy import ModelLevel
    from stagedspec.models.model_loading import ModelSpec

    with pytest.raises(ValueError, match=rf"int4_rows must be an integer in 0\.\.32.*{bad!r}"):
        ModelLevel(model=ModelSpec(source="tiny"), int4_rows=bad).validate()


def test_int4_rows_on_a_cuda_model_is_refused():
    from stagedspec.drafters.hierarchy import ModelLevel
    from stagedspec.models.model_loading import ModelSpec

    with pytest.raises(ValueError, match=r"int4_rows=2 runs a CPU kernel only.*'cuda'"):
        ModelLevel(model=ModelSpec(source="tiny", device="cuda"), int4_rows=2).validate()


def test_step_curve_by_hand():
    """Per row count the pass through the plan's path (the 4-bit pass swapped in at its rows),
    made non-decreasing by pooling, over its first value: rows 1-3 take int4 at 1 (10 + 4 - 8 =
    6), 'a' at 2 (8) and 'b' at 3 (5): 6, 8, 5 pools its last two to 6.5, so 6, 6.5, 6.5 -> 1,
    13/12, 13/12."""
    from stagedspec.engine.kernels import KernelChoice
    from stagedspec.tuning.kernel_calibration import Calibration, step_curve

    cal = Calibration(
        key={},
        times_ms={"1": {"a": 10.0, "b": 30.0}, "2": {"a": 8.0, "b": 9.0}, "3": {"a": 7.0, "b": 5.0}},
        int4_ms={"1": {"int4": 4.0, "dense": 8.0}, "2": {"int4": 20.0, "dense": 9.0}},
    )
    plan = KernelChoice(linear=("a", "a", "b"), int4_rows=1, int4_exact=True)
    assert step_curve(cal, plan) == pytest.approx((1.0, 13 / 12, 13 / 12))
    assert step_curve(Calibration(key={}), plan) == ()  # nothing timed: no curve
