"""Sampled speculative decoding must reproduce the target's distribution exactly.

Set-up: a tiny-vocabulary random target (8 tokens, peaked logits) and a deliberately
different draft (its first layer only: acceptance about 34%). Each row of a large batch
is an independent sample of **4 tokens** (batch size > 1 is exercised on the way), so
drafts of 3 are accepted whole, cut by a rejection, or followed by a bonus token, and a
staged level's inner rounds end inside the draft; the 3rd and 4th tokens come from all of
these. Two chi-square goodness-of-fit tests per case, of the joint of tokens (1, 2) and
of tokens (3, 4), against the exact joints, computed by enumerating all 8^4 paths through
the target; alpha = 1e-4 per case, Bonferroni-split between the two pairs (the test and
its set-up live in ``tests/oracles.py``, which other rooms' chi-square tests share).

Power: ``test_mutant_is_caught`` runs broken rules, each one fault, with the same N and
asserts that a pair's statistic exceeds its critical value; the measured statistics are
in the mutants' comments (critical values 64.1 for tokens 1-2, 26 degrees of freedom, and
84.8 for tokens 3-4, 40; honest cases measured 1-59 against their critical values).

Kernel plans: the cases run through Hugging Face's path (``HF_KERNELS``); two of them again
through a fast plan (every GEMM path, GQA packing, slot cache, lean layers), with the
same N and critical values, and one kernel fault under that plan is among the mutants.
"""

from __future__ import annotations

import copy

import inspect
import textwrap
import types

import pytest
import torch

from stagedspec.drafters import (
    BypassDrafter,
    KatzNgramDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    model_drafter,
    ngram_drafters,
    tree_growth,
)
from stagedspec.engine import attention_kernels, coupling, decoding, kernels, verification
from stagedspec.engine.kernels import HF_KERNELS, KernelChoice, available_paths
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import TreeShape
from tests.oracles import T1, V, chi2_models, draw, exact_pairs, lower_model, staged_drafter, statistics


def _model_chain():
    return ModelDrafter(chi2_models()[1], k=3)


def _model_tree():
    return ModelDrafter(chi2_models()[1], k=3, tree=TreeShape.parse({"widths": [3, 2]}))


def _model_tree_221():
    return ModelDrafter(chi2_models()[1], tree=TreeShape.parse({"widths": [2, 2, 1]}))


def _dynamic():
    return ModelDrafter(chi2_models()[1], tree=TreeShape.parse({"dynamic": {"budget": 6, "topk": 3, "depth": 3}}))


_dynamic.batch = 25  # a dynamic tree grows row by row here: every row's expansion pads all rows


def _staged_tree():
    return ModelDrafter(
        chi2_models()[1],
        tree=TreeShape.parse({"widths": [2, 2, 1]}),
        lower=ModelDrafter(lower_model(), k=2, name="inner"),
    )


def _bypass():
    """Rows whose suffix repeats an earlier pair (the prompt has "5 2" twice) take a copy of
    up to 3 tokens; the others a staged draft: a batch mixes both every round."""
    return BypassDrafter(staged_drafter(), k=3, min_match=2)


def _bypass_miss():
    """Copies on any match, but a row whose last copy had fewer than 2 tokens accepted
    takes the staged draft next: the route depends on the round before."""
    return BypassDrafter(staged_drafter(), k=3, min_match=1, miss_below=2)


def _int4_chain():
    """The draft's every forward through 4-bit copies of its weights (``int4_rows`` over any
    row count: the 1000-row batches here exceed the 2 rows the Qwen preset uses): its q
    moves away from the model's own, and the output must not."""
    return ModelDrafter(chi2_models()[1], k=3, int4_rows=1 << 30)


def _requant_chain():
    """The draft re-encoded as Q4_K blocks (``weights=requant_q4k``) through the native kernel at
    every row count, int8 activations included: another q again, the same output."""
    from stagedspec.models.gguf_native import reencode

    # a copy: the cached draft shares its layer and head with the cached target, and blocks attached to them
    # would turn the native kernel on for any later level drafting with that target (its q then not the target's p)
    draft = copy.deepcopy(chi2_models()[1])
    assert reencode(draft, None) == 5  # 1 layer: q/k/v, o, gate/up, down; the head
    return ModelDrafter(draft, k=3)


def _ngram():
    return KatzNgramDrafter(V, k=2, order=2)


def _lookup():
    return PromptLookupDrafter(k=2)


def _stop_alternatives():
    """A chain that stops after a pick the draft gives q < 0.6 and offers its two
    runners-up there as point-mass leaves."""
    return ModelDrafter(chi2_models()[1], k=3, stop_below=0.6, stop_alternatives=2)


def _gated_ngram_staged():
    """An n-gram level that drafts for the small model only from a distribution whose
    likeliest token has p >= 0.35 (``min_top``)."""
    return ModelDrafter(chi2_models()[1], k=3, lower=KatzNgramDrafter(V, k=2, order=2, min_top=0.35))


T07 = SamplingConfig(temperature=0.7, top_k=5, top_p=0.9, seed=5)
CASES = {
    "small-chain": (_model_chain, T1),
    "small-tree": (_model_tree, T1),
    "staged": (staged_drafter, T1),
    "ngram": (_ngram, T1),
    "lookup": (_lookup, T1),
    "chain-t0.7-topk-topp": (_model_chain, T07),
    "tree221-t0.8-topp": (_model_tree_221, SamplingConfig(temperature=0.8, top_p=0.95, seed=6)),
    "dynamic-t0.7-topk": (_dynamic, SamplingConfig(temperature=0.7, top_k=5, seed=7)),
    "staged-t0.7-topk-topp": (staged_drafter, T07),
    "bypass-staged": (_bypass, T1),
    "bypass-staged-t0.7-topk-topp": (_bypass, T07),
    "bypass-after-miss": (_bypass_miss, T1),
    "int4-draft": (_int4_chain, T1),
    "int4-draft-t0.7-topk-topp": (_int4_chain, T07),
    "requant-draft-t0.7-topk-topp": (_requant_chain, T07),
    "stop-alternatives": (_stop_alternatives, T1),
    "ngram-gated>small": (_gated_ngram_staged, T1),
}


@pytest.mark.parametrize(
    "factory,cfg",
    [
        *CASES.values(),
        (_staged_tree, T1),
        (_staged_tree, T07),
    ],
    ids=[*CASES, "staged-tree", "staged-tree-t0.7-topk-topp"],
)
def test_emitted_distribution_matches_target(factory, cfg):
    """Staged trees included: a staged level that refused a tree (ValueError) fails here,
    it is not skipped."""
    for pair, stat, df, crit in statistics(factory, cfg):
        assert stat < crit, f"{pair}: chi2={stat:.1f} df={df} crit={crit:.1f}"


_PATHS = available_paths(torch.float32, torch.device("cpu"))
FAST = KernelChoice(
    name="fast",
    linear=tuple(_PATHS[i % len(_PATHS)] for i in range(8)),
    gqa_packing=True,
    slot_cache=True,
    lean_layers=True,
)
"""A fast plan with every GEMM path available here somewhere in 1..8 rows (so the
baseline's one-row forwards and verification's several-row forwards take different
kernels), GQA packing, the slot cache and the lean layers."""


@pytest.mark.parametrize(
    "factory,cfg", [(_model_chain, T1), (_model_tree_221, T07)], ids=["small-chain", "tree221-t0.7-topk-topp"]
)
def test_emitted_distribution_matches_target_under_the_fast_plan(factory, cfg):
    """The same test, same N and critical values, with every forward through a fast
    kernel plan: exact up to kernel rounding (``kernels.py``), which chi-square at this N
    cannot see, while a kernel fault shows (``test_mutant_is_caught``, "fast plan: ...")."""
    for pair, stat, df, crit in statistics(factory, cfg, plan=FAST):
        assert stat < crit, f"{pair}: chi2={stat:.1f} df={df} crit={crit:.1f}"


# ---------------------------------------------------------------------------- mutants
def _broken_ratio(p, q, x):
    px = float(p[x])
    qx = 1.0 if q is None else float(q[x])
    return min(1.0, qx / px) if px > 0 else 1.0


def _no_residual(p, q, x):
    return p


def mutate(monkeypatch, modules, owner, name: str, sites: list[tuple[str, str]]) -> None:
    """Replace ``owner.name`` by its own source with one edit applied: the first of
    ``sites`` (old, new) found in it (a site per version of the code; exactly one must
    match, so a mutant never silently tests the unchanged code). The mutated function is
    set on ``owner`` and wherever ``modules`` imported it by name. It reads its module's
    live globals, not a copy: a copy would freeze module state read at call time (the
    active kernel plan), and a kernel mutant would silently run the unplanned path."""
    fn = getattr(owner, name)
    src = textwrap.dedent(inspect.getsource(fn))
    found = [(old, new) for old, new in sites if src.count(old) == 1]
    assert len(found) == 1, f"mutation site not found in {name}: update this mutant to the code"
    namespace = dict(fn.__globals__)
    exec(compile(src.replace(*found[0]), inspect.getsourcefile(fn), "exec"), namespace)
    made = namespace[name]
    mutant = types.FunctionType(made.__code__, fn.__globals__, name, made.__defaults__, made.__closure__)
    mutant.__kwdefaults__ = made.__kwdefaults__
    monkeypatch.setattr(owner, name, mutant)
    for module in modules:
        monkeypatch.setattr(module, name, mutant)


def _siblings_against_original_p(monkeypatch):
    """Each sibling tested against the node's p instead of the residual left by the
    siblings rejected before it; the final sample still takes that residual."""
    mutate(
        monkeypatch,
        [coupling],
        verification,
        "verify_tree",
        [("if u < accept_probability(p_cur, q, x):", "if u < accept_probability(p[node + 1], q, x):")],
    )


def _staged_bonus_q_at_root(monkeypatch):
    """A staged level reports q = p[0] (its distribution at the inner root) for the bonus
    token of an inner round, instead of its distribution at the last accepted node."""
    mutate(
        monkeypatch,
        [],
        model_drafter.ModelDrafter,
        "_take_inner_round",
        [
            ("dists = [p[0]] + [p[i + 1] for i in path]", "dists = ([p[0]] + [p[i + 1] for i in path])[:-1] + [p[0]]"),
            ("rows = [0] + [i + 1 for i in path]", "rows = ([0] + [i + 1 for i in path])[:-1] + [0]"),
        ],
    )


def _fast_plan_causal_leak(monkeypatch):
    """Fast plan only: the packed attention's causal mask (verification rows with no holes)
    lets each row see the next one. The models are installed first, so the install-time
    logits check (``kernels.check_lean_layers``, which refuses this fault) does not run
    again: what is measured is the chi-square test's own power under the plan."""
    target, draft = chi2_models()
    kernels.install(target.model)
    kernels.install(draft)
    mutate(
        monkeypatch,
        [kernels],
        attention_kernels,
        "packed_gqa_attention",
        [(").triu(1)", ").triu(2)")],
    )


def _alternatives_carry_q(monkeypatch):
    """The runners-up offered beside an unsure pick carry the draft's q, as if they were
    drawn from it, instead of being point masses (deterministic given the pick)."""
    mutate(
        monkeypatch,
        [model_drafter, ngram_drafters],
        tree_growth,
        "grow_trees",
        [
            ("trees[b].add(alt[r - 1], node, None, origin, r)", "trees[b].add(alt[r - 1], node, dist.q, origin, r)"),
        ],
    )


def _gate_reads_the_drawn_pick(monkeypatch):
    """The n-gram's gate draws its pick first and drafts only when the drawn token is
    likely (q >= min_top): what it offers is then no longer a draw from the q it reports."""
    mutate(
        monkeypatch,
        [],
        ngram_drafters.KatzNgramDrafter,
        "_next_token_dist",
        [
            (
                "    if self.min_top <= 0.0 or float(p.max()) >= self.min_top:\n"
                "        dist = NodeDist.from_scores(torch.log(p.clamp_min(1e-30)), self.sampling)\n",
                "    dist = NodeDist.from_scores(torch.log(p.clamp_min(1e-30)), self.sampling)\n"
                "    x = int(torch.multinomial(dist.q, 1, generator=self.generator).item())\n"
                "    dist = NodeDist(dist.raw, dist.q, pick=x) if float(dist.q[x]) >= self.min_top else None\n",
            )
        ],
    )


def _target_quantized(monkeypatch):
    """The target's forwards, not the draft's, through 4-bit copies of its weights (the
    decoder's refusal of such a plan removed): the output follows the 4-bit target, not
    the target."""
    mutate(
        monkeypatch,
        [],
        decoding.SpeculativeDecoder,
        "__init__",
        [
            (
                "self.kv = KVModel(target, name=TARGET, plan=plan)",
                "self.kv = KVModel(target, name=TARGET, plan=plan.for_draft(1 << 30))",
            )
        ],
    )


@pytest.mark.parametrize(
    "name,patch,factory,plan",
    [
        # measured chi2 (tokens 1-2 / 3-4): 18240 / 3968
        (
            "min(1,q/p)",
            lambda mp: mp.setattr(verification, "accept_probability", _broken_ratio),
            _model_chain,
            HF_KERNELS,
        ),
        # 589 / 576: a chain rejects once per round, so this removes just that residual
        ("no residual", lambda mp: mp.setattr(verification, "residual_after", _no_residual), _model_chain, HF_KERNELS),
        # 435 / 607
        ("no residual between siblings", _siblings_against_original_p, _model_tree, HF_KERNELS),
        # 54 / 138: tokens 1-2 alone (the old two-token test) stay under the critical value
        ("staged bonus q = p[0]", _staged_bonus_q_at_root, staged_drafter, HF_KERNELS),
        # 945 / 571
        ("fast plan: causal mask one row late", _fast_plan_causal_leak, _model_chain, FAST),
        # 518 / 320 (README: 405 against 85 in test_early_stop's set-up)
        ("alternatives carry q", _alternatives_carry_q, _stop_alternatives, HF_KERNELS),
        # 234 / 69 (README: 134 against 51 in test_ngram_gate's set-up)
        ("n-gram gate reads the drawn pick", _gate_reads_the_drawn_pick, _gated_ngram_staged, HF_KERNELS),
        # 2066 / 3227 (README: 2162 / 3164)
        ("target quantized to 4 bits", _target_quantized, _model_chain, HF_KERNELS),
    ],
)
def test_mutant_is_caught(monkeypatch, name, patch, factory, plan):
    """The same test, same N, rejects a rule with one fault: the test has power there."""
    patch(monkeypatch)
    stats = statistics(factory, T1, plan=plan)
    assert any(stat > crit for _, stat, _, crit in stats), f"{name}: " + ", ".join(
        f"{pair} chi2={stat:.1f} (crit {crit:.1f})" for pair, stat, _, crit in stats
    )


def test_greedy_is_a_point_mass_of_the_same_rule():
    cfg = SamplingConfig(temperature=0.0)
    counts = draw(_model_chain, cfg, 1000)
    for pair, exact in exact_pairs(cfg).items():
        assert int((counts[pair] > 0).sum()) == 1
        assert int(torch.argmax(counts[pair])) == int(torch.argmax(exact))
