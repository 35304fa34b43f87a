"""A GGUF's own 4-bit blocks as the target's weights (``target.weights=gguf_q4``): the codes,
scales and minima decoded exactly as gguf's own dequantization computes them, attached only
where they reproduce the dense weight, and a target decoding through them giving the dense
target's output."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

from stagedspec.engine import kernels
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kernels import HF_KERNELS, KernelChoice
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.models import gguf_int4
from stagedspec.models.model_loading import ModelSpec, load_model
from tests import oracles
from tests.oracles import N_NEW, tiny_prompts

EXACT = KernelChoice(
    name="exact4",
    linear=("linear",) * 8,
    gqa_packing=True,
    slot_cache=True,
    lean_layers=True,
    int4_rows=8,
    int4_exact=True,
)
DENSE = KernelChoice(name="dense", linear=("linear",) * 8, gqa_packing=True, slot_cache=True, lean_layers=True)


def _random_q4k_blocks(rows: int, blocks: int, seed: int = 0) -> np.ndarray:
    """Random Q4_K rows: positive float16 d and dmin, random 6-bit scales and minima, codes."""
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, size=(rows * blocks, gguf_int4.Q4K_BLOCK_BYTES), dtype=np.uint8)
    b[:, 0:2] = rng.uniform(1e-3, 1e-2, rows * blocks).astype(np.float16).view(np.uint8).reshape(-1, 2)
    b[:, 2:4] = rng.uniform(1e-3, 1e-2, rows * blocks).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return b.reshape(rows, -1)


def _rebuilt(codes: torch.Tensor, scale: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
    g = gguf_int4.INT4_GROUP
    return scale.repeat_interleave(g, 1) * codes + lo.repeat_interleave(g, 1)


def test_q4k_codes_scales_and_minima_rebuild_ggufs_own_dequantization_bit_for_bit():
    raw = _random_q4k_blocks(rows=6, blocks=3)
    codes, scale, lo = gguf_int4.decode_q4k(torch.from_numpy(raw))
    assert codes.shape == (6, 768) and scale.shape == lo.shape == (6, 24)
    assert int(codes.min()) == 0 and int(codes.max()) == 15
    ref = torch.from_numpy(dequantize(raw, QT.Q4_K)).reshape(6, 768)
    assert torch.equal(_rebuilt(codes, scale, lo), ref)


def test_q41_codes_rebuild_ggufs_own_dequantization_bit_for_bit():
    w = np.random.default_rng(1).standard_normal((5, 96)).astype(np.float32)
    raw = quantize(w, QT.Q4_1)
    codes, scale, lo = gguf_int4.decode_q41(torch.from_numpy(raw))
    assert codes.shape == (5, 96) and scale.shape == (5, 3)
    assert torch.equal(_rebuilt(codes, scale, lo), torch.from_numpy(dequantize(raw, QT.Q4_1)).reshape(5, 96))


def test_gguf_tensor_names_map_to_the_linears_they_weigh():
    assert gguf_int4.hf_linear_name("blk.3.ffn_up.weight") == "model.layers.3.mlp.up_proj"
    assert gguf_int4.hf_linear_name("blk.0.attn_output.weight") == "model.layers.0.self_attn.o_proj"
    assert gguf_int4.hf_linear_name("output.weight") == "lm_head"
    assert gguf_int4.hf_linear_name("token_embd.weight") is None
    assert gguf_int4.hf_linear_name("blk.0.attn_norm.weight") is None


def _q4_target(seed: int = 0, vocab: int = 128, init: float = 0.05):
    """A tiny float32 Llama whose Linear weights are put on Q4_1's grid (gguf's own
    quantizer), with the blocks a GGUF of it would hold."""
    t = load_model(
        ModelSpec(
            source="tiny", seed=seed, tiny={"vocab_size": vocab, "num_hidden_layers": 2, "initializer_range": init}
        )
    )
    blocks: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, mod in t.model.named_modules():
            if isinstance(mod, torch.nn.Linear):
                raw = quantize(mod.weight.numpy(), QT.Q4_1)
                mod.weight.copy_(torch.from_numpy(dequantize(raw, QT.Q4_1)).reshape(mod.weight.shape))
                blocks[f"q4_1:{name}"] = torch.from_numpy(raw)
    return t, blocks


def test_attach_packs_every_gemm_module_whose_blocks_reproduce_its_weight():
    t, blocks = _q4_target()
    bad = "model.layers.1.mlp.down_proj"
    wrong = blocks.copy()
    wrong[f"q4_1:{bad}"] = blocks[f"q4_1:{bad}"].roll(1, 0)  # rows of another module: values differ
    attached, failed = gguf_int4.attach(t.model, wrong)
    parts = kernels.gemm_module_parts(t.model)
    # per layer: fused q/k/v, o, fused gate/up, down; and the LM head
    assert len(parts) == 9 and (attached, failed) == (8, 1)
    exact = {"+".join(n) for m, n in parts if getattr(m, "_stagedspec_int4_exact", False)}
    assert bad not in exact and "lm_head" in exact
    assert "model.layers.0.self_attn.q_proj+model.layers.0.self_attn.k_proj+model.layers.0.self_attn.v_proj" in exact


def test_a_target_on_its_own_4bit_codes_computes_the_dense_targets_logits_and_greedy_output():
    """Through the exact plan every GEMM of 1-8 rows runs torch's int4 kernel on the file's
    codes; the logits equal the dense path's to float32 rounding and the greedy output is
    the dense target's token for token, plain and speculative."""
    from stagedspec.drafters import ModelDrafter

    from tests.helpers import other_small

    t, blocks = _q4_target()
    prompts = tiny_prompts(3)
    ref = [
        s.output_ids
        for s in SpeculativeDecoder(t.model, None, SamplingConfig(), plan=HF_KERNELS).generate(prompts, N_NEW).sequences
    ]
    assert gguf_int4.attach(t.model, blocks) == (9, 0)
    calls: list[str] = []
    real = kernels.apply_path
    kernels.apply_path = lambda mod, path, x: calls.append(path) or real(mod, path, x)
    try:
        for drafter in (None, ModelDrafter(other_small(t.vocab_size), k=3)):
            dec = SpeculativeDecoder(t.model, drafter, SamplingConfig(), plan=EXACT)
            assert [s.output_ids for s in dec.generate(prompts, N_NEW).sequences] == ref
    finally:
        kernels.apply_path = real
    assert calls.count(kernels.PATH_INT4) > 100
    ids = torch.tensor([[5, 17, 99, 3, 64, 7]])
    with torch.no_grad():
        with DENSE.active():
            dense = t.model(ids).logits
        with EXACT.active():
            four = t.model(ids).logits
    err = float((four - dense).norm() / dense.norm())
    assert err < 1e-5, err  # another kernel, the same weights (here float32 sums them alike: 0)


def test_a_target_plan_with_re_quantized_4bit_weights_is_still_refused():
    t, _ = _q4_target(seed=3)
    with pytest.raises(ValueError, match=r"re-quantized 4-bit weights \(int4_rows=2\).*target.weights=gguf_q4"):
        SpeculativeDecoder(t.model, None, SamplingConfig(), plan=DENSE.for_draft(2))
    assert not DENSE.for_draft(2).int4_exact and not EXACT.for_draft(2).int4_exact
    # an exact plan never packs a module from its dense weight
    plain = torch.nn.Linear(64, 32)
    plain._stagedspec_packs = {}
    assert not kernels.int4_allowed(plain, EXACT) and kernels.int4_allowed(plain, EXACT.for_draft(2))


@pytest.mark.parametrize(
    "spec,match",
    [
        (
            dict(source="tiny", weights="q4"),
            r"unknown weights 'q4'; valid: \['dense', 'gguf_q4', 'gguf_native', 'requant_q4k'\]",
        ),
        (dict(source="tiny", weights="gguf_q4"), r"weights='gguf_q4'.*source 'tiny'.*set weights=dense"),
    ],
)
def test_bad_weights_are_refused_before_loading(spec, match):
    with pytest.raises(ValueError, match=match):
        ModelSpec(**spec).validate()


def test_a_step_on_the_4bit_path_reads_the_packs_bytes_instead_of_the_dense_weights():
    from stagedspec.evaluation.bench_machine import step_bytes

    t, blocks = _q4_target()
    gguf_int4.attach(t.model, blocks)
    dense = step_bytes(t.model)
    # tiny Llama, hidden 64, intermediate 128, 2 layers, vocab 128: per layer q/k/v 128x64, o 64x64,
    # gate/up 256x64, down 64x128; head 128x64. The 4-bit pack of an [out, in] weight: in/2 bytes of
    # codes per row, and per group of 32 a scale and an offset in float32 (8 bytes)
    shapes = [(128, 64), (64, 64), (256, 64), (64, 128)] * 2 + [(128, 64)]
    saved = sum(o * i * 4 - (o * i // 2 + o * (i // 32) * 8) for o, i in shapes)
    assert step_bytes(t.model, plan=EXACT) == dense - saved
    assert step_bytes(t.model, tokens=9, plan=EXACT) == step_bytes(t.model, tokens=9)  # past int4_rows: dense
    assert step_bytes(t.model, plan=DENSE) == dense


# --------------------------------------------------------------------------- sampled output
def _q4_chi2_models(monkeypatch):
    """The chi-square set-up of ``oracles.statistics`` (8-token vocabulary, peaked logits, a
    1-layer draft) with the target's weights on Q4_1's grid and its packs attached; every
    forward of any row count through the 4-bit path (the batches there have 1000 rows)."""
    target, blocks = _q4_target(vocab=oracles.V, init=0.3)
    # every GEMM but the 8-row head (the kernel takes multiples of 16 rows): that one stays dense
    assert gguf_int4.attach(target.model, blocks) == (8, 0)
    from stagedspec.models.model_loading import truncated_copy

    draft = truncated_copy(target, 1).model
    monkeypatch.setattr(oracles, "chi2_models", lambda: (target, draft))
    monkeypatch.setattr(
        oracles, "exact_pairs", oracles.exact_pairs.__wrapped__
    )  # the joints of this target, not the cached ones
    plan = KernelChoice(
        name="exact4-all", int4_rows=1 << 30, int4_exact=True, gqa_packing=True, slot_cache=True, lean_layers=True
    )
    return draft, plan


def _stats(draft, plan):
    from stagedspec.drafters import ModelDrafter

    return oracles.statistics(lambda: ModelDrafter(draft, k=3), oracles.T1, n=oracles.N, plan=plan)


def test_sampled_output_of_a_target_on_its_4bit_codes_has_the_targets_distribution(monkeypatch):
    """Chi-square (same N, alpha and critical values as ``test_sampling_exact``) of a 0.5B-style
    draft speculating for a target whose every GEMM runs the int4 kernel on its codes; the
    exact joints come from Hugging Face's dense forward of the same weights. Measured chi2
    (tokens 1-2 / 3-4): 29.6 (df 24) / 55.2 (df 42) against critical values 61.1 / 87.6."""
    draft, plan = _q4_chi2_models(monkeypatch)
    for pair, stat, df, crit in _stats(draft, plan):
        assert stat < crit, f"{pair}: chi2={stat:.1f} df={df} crit={crit:.1f}"


def test_a_dense_copy_one_grid_step_off_the_kernels_weight_is_caught(monkeypatch):
    """Power: the dense copy made as ``(q - 7) * scale + offset`` (every weight one grid step
    above what the int4 kernel multiplies by; the codes' check against the GGUF's values runs
    before it and cannot see it). The exact joints come from the dense copy, the samples from
    the kernel. Measured chi2: 167706 / 28465."""
    real = gguf_int4.kernel_weight
    monkeypatch.setattr(gguf_int4, "kernel_weight", lambda codes, so: real(codes + 1, so))
    draft, plan = _q4_chi2_models(monkeypatch)
    stats = _stats(draft, plan)
    assert any(stat > crit for _, stat, _, crit in stats), stats
