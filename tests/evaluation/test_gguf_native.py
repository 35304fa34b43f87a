"""A GGUF's own Q4_K / Q6_K blocks as the target's weights at every row count
(``target.weights=gguf_native``): attached only where they reproduce the dense weight, a
target on them decoding speculatively to its own plain decoding's tokens, and sampling its
own distribution (chi-square, with a mutant that changes only the verification's rows)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from stagedspec.engine import kernels
from stagedspec.engine import qk_kernels as qk
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kernels import KernelChoice
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.models import gguf_native
from stagedspec.models.model_loading import ModelSpec, load_model
from tests import oracles
from tests.helpers import random_gguf_blocks
from tests.oracles import N_NEW, tiny_prompts

COLS = [0, 4] if qk.has_cols() else [0]
"""native_cols_from: 0 the 4-row loop at every row count; 4 the cols loop from 4 rows."""


def native_plan(cols_from: int = 0) -> KernelChoice:
    return KernelChoice(
        name="native",
        linear=("linear",) * 8,
        gqa_packing=True,
        slot_cache=True,
        lean_layers=True,
        native=True,
        native_cols_from=cols_from,
    )


Q6_PARTS = ("v_proj", "down_proj", "lm_head")
"""Parts stored as Q6_K, as in Qwen2.5-Coder-1.5B's Q4_K_M file (some v and down, the head)."""


def _native_target(seed: int = 0, vocab: int = 128, size: float = 0.05, layers: int = 2, **tiny):
    """A tiny float32 Llama of width 256 (one Q4_K / Q6_K block per row of most weights) whose
    Linear weights are random GGUF blocks' values, and those blocks; ``tiny``: more config."""
    t = load_model(
        ModelSpec(
            source="tiny",
            seed=seed,
            tiny={
                "vocab_size": vocab,
                "num_hidden_layers": layers,
                "hidden_size": 256,
                "intermediate_size": 512,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                **tiny,
            },
        )
    )
    blocks: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for i, (name, mod) in enumerate(t.model.named_modules()):
            if isinstance(mod, torch.nn.Linear):
                kind = "q6_k" if name.endswith(Q6_PARTS) else "q4_k"
                raw = torch.from_numpy(random_gguf_blocks(kind, *mod.weight.shape, seed=100 * seed + i, size=size))
                seg = qk.Segment(kind, qk.repack(kind, raw), 0, *mod.weight.shape)
                mod.weight.copy_(qk.dequantize(seg))
                blocks[f"{kind}:{name}"] = raw
    return t, blocks


def test_attach_gives_blocks_to_every_gemm_module_whose_blocks_reproduce_its_weight():
    t, blocks = _native_target()
    bad = "q4_k:model.layers.1.mlp.gate_proj"
    wrong = blocks.copy()
    wrong[bad] = blocks[bad].roll(1, 0)  # another row's blocks: values differ
    assert gguf_native.attach(t.model, wrong) == (8, 1)
    parts = kernels.gemm_module_parts(t.model)
    held = {"+".join(n) for m, n in parts if getattr(m, "_stagedspec_native", None)}
    assert len(parts) == 9 and "model.layers.1.mlp.gate_proj+model.layers.1.mlp.up_proj" not in held
    assert "lm_head" in held and "model.layers.0.mlp.down_proj" in held
    qkv = next(m for m, n in parts if n[0] == "model.layers.0.self_attn.q_proj")
    assert [(s.kind, s.start, s.rows) for s in qkv._stagedspec_native] == [
        ("q4_k", 0, 256),
        ("q4_k", 256, 128),
        ("q6_k", 384, 128),
    ]
    named = dict(t.model.named_modules())
    v = named["model.layers.0.self_attn.v_proj"]._stagedspec_native[0]
    assert v.start == 0 and v.cache is qkv._stagedspec_native[2].cache  # each part on its own too, one cols copy
    assert not getattr(named["model.layers.1.mlp.up_proj"], "_stagedspec_native", None)


@pytest.mark.parametrize("cols_from", COLS)
def test_speculative_greedy_output_of_a_native_target_is_its_own_plain_decodings(cols_from, monkeypatch):
    """Plain decoding (one row a step) and speculative decoding (verifications of 4 rows) through
    the native kernel give the same tokens; the kernel is what runs, and it is not the dense
    model (int8 activations: logits ~1e-2 apart)."""
    from stagedspec.drafters import ModelDrafter

    from tests.helpers import other_small

    t, blocks = _native_target()
    assert gguf_native.attach(t.model, blocks) == (9, 0)
    tokens: list[int] = []  # new tokens per sequence of each native product
    real = kernels.native_forward
    monkeypatch.setattr(kernels, "native_forward", lambda m, x, tf: tokens.append(x.shape[-2]) or real(m, x, tf))
    plan = native_plan(cols_from)
    prompts = tiny_prompts(3)
    plain = SpeculativeDecoder(t.model, None, SamplingConfig(), plan=plan).generate(prompts, N_NEW).sequences
    spec = SpeculativeDecoder(t.model, ModelDrafter(other_small(t.vocab_size), k=3), SamplingConfig(), plan=plan)
    assert [s.output_ids for s in spec.generate(prompts, N_NEW).sequences] == [s.output_ids for s in plain]
    assert tokens.count(4) > 50 and tokens.count(1) > 50  # verifications of k + 1 = 4, plain steps
    ids = torch.tensor([[5, 17, 99, 3, 64, 7]])
    with torch.no_grad():
        dense = t.model(ids).logits
        with plan.active():
            native = t.model(ids).logits
    err = float((native - dense).norm() / dense.norm())
    assert 1e-4 < err < 5e-2, err


def test_a_native_targets_step_reads_its_blocks_bytes_instead_of_the_dense_weights():
    from stagedspec.evaluation.bench_machine import step_bytes

    t, blocks = _native_target(seed=1)
    gguf_native.attach(t.model, blocks)
    dense = step_bytes(t.model)
    # per layer q 256x256, k/v 128x256, o 256x256, gate/up 512x256, down 256x512 (Q6_K: v, down); head 128x256 (Q6_K)
    q4 = [(256, 256), (128, 256), (256, 256), (512, 256), (512, 256)] * 2
    q6 = [(128, 256), (256, 512)] * 2 + [(128, 256)]
    saved = sum(o * i * 4 - o * i // 256 * 152 for o, i in q4) + sum(o * i * 4 - o * i // 256 * 212 for o, i in q6)
    assert step_bytes(t.model, plan=native_plan()) == dense - saved
    assert step_bytes(t.model, plan=KernelChoice(name="dense", linear=("linear",) * 8)) == dense


def _one_row_logits(model, plan: KernelChoice, prompt: list[int], chain: list[int]) -> torch.Tensor:
    """Logits of one-row forwards after ``prompt``: ``chain`` fed a token at a time as a chain,
    then the same tokens again as siblings of one another (each attends to the committed tokens
    and itself: an attention mask), through the engine's own cache."""
    from stagedspec.engine.kv_cache import KVModel

    kv = KVModel(model, name="t", plan=plan)
    kv.reset(1)
    kv.extend_chain([prompt])
    out = [kv.extend_chain([[t]])[0][0] for t in chain]
    kv.sync([prompt + chain])
    out += [kv.extend([[t]], [[-1]], [[0]])[0][0] for t in chain]
    return torch.stack(out)


def _bf16_native_target(seed: int, norm_seed: int):
    """A tiny native target with q/k/v/o biases, in bfloat16, its norms' weights drawn (not all ones:
    the norms' rounding shows)."""
    t, blocks = _native_target(seed=seed, attention_bias=True)
    assert gguf_native.attach(t.model, blocks) == (9, 0)
    g = torch.Generator().manual_seed(norm_seed)
    with torch.no_grad():
        for name, p in t.model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
    t.model.to(torch.bfloat16)
    return t


def _plain_tokens(model, plan: KernelChoice) -> list[list[int]]:
    """Plain greedy decoding's tokens for two tiny prompts under ``plan``."""
    out = SpeculativeDecoder(model, None, SamplingConfig(), plan=plan).generate(tiny_prompts(2), N_NEW)
    return [s.output_ids for s in out.sequences]


def test_one_row_forwards_run_a_layer_per_kernel_call_and_give_the_torch_layers_bits(monkeypatch):
    """A bfloat16 native target (with q/k/v/o biases) runs each decoder layer of a one-row forward
    as one C call (``qk_kernels.layer1``) and its logits are the torch lean layer's bit for bit (it
    rounds to bfloat16 where torch does) where no mask is needed, and up to rounding under a mask;
    ``native_layers=False`` keeps the torch layer; plain decoding's tokens are the same either way."""
    t = _bf16_native_target(seed=3, norm_seed=0)
    calls: list[int] = []
    real = kernels.layer1
    monkeypatch.setattr(kernels, "layer1", lambda w, x, *a, **k: calls.append(x.numel()) or real(w, x, *a, **k))
    plan = native_plan()
    torch_plan = dataclasses.replace(plan, native_layers=False)
    prompt, chain = [5, 17, 99, 3, 64, 7, 41], [12, 88, 3, 120, 9, 9]
    fast = _one_row_logits(t.model, plan, prompt, chain)
    assert calls == [256] * (2 * 2 * len(chain))  # 2 layers, 12 one-row forwards
    calls.clear()
    slow = _one_row_logits(t.model, torch_plan, prompt, chain)
    assert not calls
    n = len(chain)
    assert torch.equal(fast[:n], slow[:n]), float((fast - slow)[:n].abs().max())
    # under a mask torch's attention takes another kernel, which rounds otherwise: measured 0.0078-0.0117
    # (logits up to 0.73); the same layer ignoring the mask: 0.11-0.21 on every sibling after the first
    assert float((fast - slow)[n:].abs().max()) <= 0.03
    assert _plain_tokens(t.model, plan) == _plain_tokens(t.model, torch_plan)


def test_the_one_row_decoder_loop_gives_the_model_forwards_bits(monkeypatch):
    """``native_model``: a one-row forward runs embedding, rotary embedding, the layer kernels and the
    final norm as the engine's own loop, never entering Hugging Face's model forward, and its logits
    are the model forward's bit for bit, for a chain and for siblings under a mask; forwards of
    more rows still take the model forward; plain decoding's tokens are the same."""
    t = _bf16_native_target(seed=3, norm_seed=0)
    plan = native_plan()
    loop = dataclasses.replace(plan, native_model=True)
    assert "one-row decoder loop" in loop.describe() and "one-row decoder loop" not in plan.describe()
    decoder = t.model.get_decoder()
    entered: list[int] = []
    real = type(decoder).forward
    monkeypatch.setattr(type(decoder), "forward", lambda self, *a, **k: entered.append(1) or real(self, *a, **k))
    prompt, chain = [5, 17, 99, 3, 64, 7, 41], [12, 88, 3, 120, 9, 9]
    hf = _one_row_logits(t.model, plan, prompt, chain)
    through_hf = len(entered)  # the prompt's forwards and every one-row forward
    entered.clear()
    ours = _one_row_logits(t.model, loop, prompt, chain)
    assert len(entered) == 1 and through_hf >= 1 + 2 * len(chain)  # only the prompt's prefill enters it
    assert torch.equal(ours, hf), float((ours - hf).abs().max())
    assert _plain_tokens(t.model, plan) == _plain_tokens(t.model, loop)


def _rows_logits(model, plan: KernelChoice, prompt: list[int], chain: list[int]) -> list[torch.Tensor]:
    """Logits of forwards of several rows after ``prompt``, through the engine's cache: ``chain``'s
    first 2, then all of it (as a verification feeds them), then a tree of two branches (a mask)."""
    from stagedspec.engine.kv_cache import KVModel

    kv = KVModel(model, name="t", plan=plan)
    kv.reset(1)
    kv.extend_chain([prompt])
    out = []
    for n in (2, len(chain)):
        kv.sync([prompt])
        out.append(kv.extend([chain[:n]], [[-1] + list(range(n - 1))], [list(range(n))])[0])
    kv.sync([prompt])
    out.append(kv.extend([chain[:6]], [[-1, 0, 1, -1, 3, 4]], [list(range(6))])[0])
    return out


@pytest.mark.parametrize("cols_from", COLS)
def test_forwards_of_several_rows_run_two_kernel_calls_a_layer_and_give_the_torch_layers_bits(monkeypatch, cols_from):
    """A forward of n > 1 rows of a batch of one (a verification) runs each decoder layer as two C
    calls around torch's attention (``qk_kernels.layer_rows``): the norm, q/k/v, rotary embedding and
    cache write before, the o product, residuals, norm, gate/up, SiLU and down after. Its logits are
    the torch lean layer's bit for bit for chains and for a tree (the attention and its mask are the
    torch layer's own call), on the rows loop and on the cols loop (``cols_from`` 4: the 7-row chain
    and the tree take it); speculative decoding's tokens are the same either way."""
    from stagedspec.drafters import ModelDrafter

    from tests.helpers import other_small

    t, blocks = _native_target(seed=4, attention_bias=True)
    assert gguf_native.attach(t.model, blocks) == (9, 0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in t.model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
    t.model.to(torch.bfloat16)
    calls: list[tuple[int, bool]] = []
    real = kernels.layer_rows
    monkeypatch.setattr(
        kernels,
        "layer_rows",
        lambda w, x, *a, **k: calls.append((x.shape[0], 0 < k["cols_from"] <= x.shape[0])) or real(w, x, *a, **k),
    )
    plan = native_plan(cols_from)
    torch_plan = dataclasses.replace(plan, native_layers=False)
    prompt, chain = [5, 17, 99, 3, 64, 7, 41], [12, 88, 3, 120, 9, 9, 77]
    fast = _rows_logits(t.model, plan, prompt, chain)
    big = bool(cols_from)
    assert calls[:2] == [(2, False)] * 2 and calls[2:] == [(7, big)] * 2 + [(6, big)] * 2  # 2 layers each
    calls.clear()
    slow = _rows_logits(t.model, torch_plan, prompt, chain)
    assert not calls
    for a, b in zip(fast, slow):
        assert torch.equal(a, b), float((a - b).abs().max())
    prompts = tiny_prompts(2)
    tokens = [
        [
            s.output_ids
            for s in SpeculativeDecoder(t.model, ModelDrafter(other_small(t.vocab_size), k=3), SamplingConfig(), plan=p)
            .generate(prompts, N_NEW)
            .sequences
        ]
        for p in (plan, torch_plan)
    ]
    assert tokens[0] == tokens[1]


@pytest.mark.parametrize(
    "spec,match",
    [
        (dict(source="tiny", weights="native"), r"unknown weights 'native'; valid: \[.*'gguf_native'.*\]"),
        (dict(source="tiny", weights="gguf_native"), r"weights='gguf_native'.*source 'tiny'.*set weights=dense"),
    ],
)
def test_bad_native_weights_are_refused_before_loading(spec, match):
    with pytest.raises(ValueError, match=match):
        ModelSpec(**spec).validate()


# --------------------------------------------------------------------------- sampled output
def _native_chi2(monkeypatch, cols_from: int):
    """The chi-square set-up of ``oracles.statistics`` (8-token vocabulary, a 1-layer draft) with
    a target of width 256 on random blocks (its logits peaked enough to accept and reject often);
    the exact joints from the target's own one-row forwards through the native plan."""
    from stagedspec.models.model_loading import truncated_copy

    target, blocks = _native_target(vocab=oracles.V, size=0.25, seed=2)
    assert gguf_native.attach(target.model, blocks) == (9, 0)
    draft = truncated_copy(target, 1).model
    plan = native_plan(cols_from)
    monkeypatch.setattr(oracles, "chi2_models", lambda: (target, draft))
    exact = oracles.exact_pairs.__wrapped__

    def exact_native(cfg):
        with plan.active():
            return exact(cfg)

    monkeypatch.setattr(oracles, "exact_pairs", exact_native)
    return draft, plan


def _stats(draft, plan):
    from stagedspec.drafters import ModelDrafter

    return oracles.statistics(lambda: ModelDrafter(draft, k=3), oracles.T1, n=oracles.N, plan=plan)


def test_sampled_output_of_a_native_target_has_its_own_distribution(monkeypatch):
    """Chi-square (same N, alpha and critical values as ``test_sampling_exact``) of a draft
    speculating for a target whose every GEMM runs the native kernel (its cols loop for the
    verifications where the build has it). Measured chi2 (tokens 1-2 / 3-4): 69.3 (df 61) /
    60.8 (df 63) against critical values 113.8 / 116.5 (AVX-512 build, 2026-12-06)."""
    draft, plan = _native_chi2(monkeypatch, COLS[-1])
    for pair, stat, df, crit in _stats(draft, plan):
        assert stat < crit, f"{pair}: chi2={stat:.1f} df={df} crit={crit:.1f}"


def test_a_verification_computing_other_logits_than_plain_decoding_is_caught(monkeypatch):
    """Power: the products of the verifications' forwards (2-4 new tokens a sequence) scaled by
    1.1, so the target that accepts and resamples is not the one the exact joints (forwards of
    5-8 tokens) and plain steps (1 token) compute. Measured chi2: 162.6 / 95.6."""
    draft, plan = _native_chi2(monkeypatch, COLS[-1])
    real = kernels.native_forward
    monkeypatch.setattr(
        kernels, "native_forward", lambda m, x, tf: real(m, x, tf) * (1.1 if 1 < x.shape[-2] < 5 else 1.0)
    )
    stats = _stats(draft, plan)
    assert any(stat > crit for _, stat, _, crit in stats), stats


# --------------------------------------------------------------------------- a re-encoded draft
def test_a_draft_reencoded_as_q4k_runs_the_kernel_and_keeps_the_targets_greedy_output(monkeypatch):
    """A draft with ``weights=requant_q4k``'s blocks multiplies by them in every forward (its plan
    turns ``native`` on for it alone: the dense target never takes the kernel) and the output is
    the target's plain decoding; ``native=False`` keeps the same model off its blocks."""
    from stagedspec.drafters import ModelDrafter

    from tests.helpers import other_small

    t = load_model(ModelSpec(source="tiny", seed=3))
    draft = other_small.__wrapped__(t.vocab_size)  # a model of its own: other_small's is shared (cached)
    assert gguf_native.reencode(draft, None) == 5
    calls: list[int] = []
    real = kernels.native_forward
    monkeypatch.setattr(kernels, "native_forward", lambda m, x, tf: calls.append(x.shape[-2]) or real(m, x, tf))
    plan = KernelChoice(name="fast", linear=("linear",) * 8, gqa_packing=True, slot_cache=True, lean_layers=True)
    prompts = tiny_prompts(3)
    plain = SpeculativeDecoder(t.model, None, SamplingConfig(), plan=plan).generate(prompts, N_NEW).sequences
    assert calls == []
    spec = SpeculativeDecoder(t.model, ModelDrafter(draft, k=3), SamplingConfig(), plan=plan)
    assert [s.output_ids for s in spec.generate(prompts, N_NEW).sequences] == [s.output_ids for s in plain]
    assert len(calls) > 100 and set(calls) >= {1}
    calls.clear()
    off = SpeculativeDecoder(t.model, ModelDrafter(draft, k=3, native=False), SamplingConfig(), plan=plan)
    assert [s.output_ids for s in off.generate(prompts, N_NEW).sequences] == [s.output_ids for s in plain]
    assert calls == []


def test_reencoded_blocks_are_cached_and_read_back(tmp_path, monkeypatch):
    from tests.helpers import other_small

    first, second = other_small.__wrapped__(128), other_small.__wrapped__(128)  # not the shared cached one
    assert gguf_native.reencode(first, tmp_path) == 5 and (tmp_path / gguf_native.REQUANT_FILE).is_file()
    monkeypatch.setattr(qk, "encode_q4k", lambda w: pytest.fail("encoded again"))
    assert gguf_native.reencode(second, tmp_path) == 5
    for (a, _), (b, _) in zip(kernels.gemm_module_parts(first), kernels.gemm_module_parts(second), strict=True):
        assert all(
            torch.equal(x.blocks, y.blocks) and x.start == y.start
            for x, y in zip(a._stagedspec_native, b._stagedspec_native)
        )


def test_a_reencoded_model_off_the_cpu_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ValueError, match=r"weights='requant_q4k' runs a CPU kernel; the model is on 'cuda'"):
        ModelSpec(source="tiny", weights="requant_q4k", device="cuda").validate()


@pytest.mark.parametrize("cols_from", COLS)
def test_a_native_plan_packs_only_what_it_reads_before_the_first_forward(cols_from):
    """A module with blocks under a native plan gets no oneDNN pack of its dense weight (it never
    reads it) and, where the plan takes the cols loop, its blocks' 16-row panels at once (not at
    its first forward of that many rows, which for a lazily prefilled draft is a timed round)."""
    from tests.helpers import other_small

    draft = other_small.__wrapped__(128)
    assert gguf_native.reencode(draft, None) == 5
    kernels.install(draft)
    plan = dataclasses.replace(native_plan(cols_from), linear=("mkldnn",) * 8, long_path="mkldnn")
    if "mkldnn" not in kernels.available_paths(torch.float32, torch.device("cpu")):
        pytest.skip("no oneDNN path on this machine")
    made = kernels.prepack(draft, plan)
    mods = kernels.gemm_modules(draft)
    segs = [s for m in mods for s in m._stagedspec_native]
    assert len(mods) == 5 and all(not m.__dict__.get("_stagedspec_packs") for m in mods)
    assert all(("panels" in s.cache) == bool(cols_from) for s in segs)
    assert made == (len({id(s.cache) for s in segs}) if cols_from else 0)
    assert kernels.prepack(draft, plan) == 0  # nothing twice
    dense = dataclasses.replace(plan, native=False, native_cols_from=0)
    assert kernels.prepack(draft, dense) == 5 and all(set(m._stagedspec_packs) == {"mkldnn"} for m in mods)
