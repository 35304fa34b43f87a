"""What bfloat16 does to exactness, measured: a position's target distribution depends on
how many rows the forward that computes it carries (plain decoding: 1; a verification: the
draft's length + 1), by rounding. The verifier's p is the k-row one, the baseline's the
1-row one, so in bfloat16 speculative sampling reproduces the target's distribution up to
the total-variation distance between the two, bounded here on a tiny model under the
default's kind of plan (the GGUF's 4-bit codes at few rows, a dense GEMM past them)."""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

from stagedspec.engine.kernels import KernelChoice, available_paths
from stagedspec.engine.sampling import SamplingConfig, probabilities
from stagedspec.models import gguf_int4
from stagedspec.models.model_loading import ModelSpec, load_model
from tests.oracles import logits_by_row_count

T07 = SamplingConfig(temperature=0.7)
DENSE_PATH = next(p for p in ("mkldnn", "wxt", "linear") if p in available_paths(torch.bfloat16, torch.device("cpu")))
PLAN = KernelChoice(
    name="bf16-q4",
    linear=(DENSE_PATH,) * 8,
    gqa_packing=True,
    slot_cache=True,
    lean_layers=True,
    int4_rows=4,
    int4_exact=True,
)
"""As calibration makes the default's plan: the int4 kernel on the file's codes at 1-4 rows, a
dense bfloat16 GEMM at more."""


def _bf16_q4_target():
    t = load_model(
        ModelSpec(
            source="tiny",
            dtype="bfloat16",
            seed=2,
            tiny={"vocab_size": 128, "num_hidden_layers": 2, "initializer_range": 0.3},
        )
    )
    blocks = {}
    with torch.no_grad():
        for name, mod in t.model.named_modules():
            if isinstance(mod, torch.nn.Linear):
                raw = quantize(mod.weight.float().numpy(), QT.Q4_1)
                mod.weight.copy_(torch.from_numpy(dequantize(raw, QT.Q4_1)).reshape(mod.weight.shape))
                blocks[f"q4_1:{name}"] = torch.from_numpy(raw)
    return t, blocks


def test_bf16_distribution_through_1_and_8_rows_differs_by_a_bounded_total_variation():
    """Measured (T = 0.7, 8 positions, logits up to 8.3): total variation 0.7-2.0% between the
    1-row (4-bit kernel) and the 8-row (dense bfloat16 GEMM) distribution of the same position;
    Hugging Face's own path through 1 and 8 rows: 0.3-1.6%. Before the dense copy was made the
    kernel's own weight (``gguf_int4.attach``): up to 5.6%. In float32 the same comparison is at
    float rounding (``test_gguf_int4``)."""
    t, blocks = _bf16_q4_target()
    gguf_int4.attach(t.model, blocks)
    prefix, toks = [5, 9, 3, 7, 7, 1, 4, 2, 11, 13], [21, 22, 23, 24, 25, 26, 27, 28]
    single, multi = logits_by_row_count(t.model, PLAN, prefix, toks)
    p1, p8 = probabilities(single.float(), T07), probabilities(multi.float(), T07)
    tv = 0.5 * (p1 - p8).abs().sum(-1)
    assert float(tv.max()) > 0  # not exact in bfloat16: the two kernels round differently
    assert float(tv.max()) < 0.03, tv  # 5.6% with the dense copy left as the GGUF's values
