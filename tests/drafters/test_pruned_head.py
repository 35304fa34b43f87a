"""A draft with a frequency-pruned LM head (FR-Spec): its logits are the full head's rows for
the kept ids and -inf elsewhere, the original model is untouched, and decoding through it
stays exact (greedy equals HF; sampled joints by chi-square)."""

from __future__ import annotations

import pytest
import torch

from stagedspec.drafters import KatzNgramDrafter, ModelDrafter
from stagedspec.drafters.pruned_head import frequent_ids, pruned_copy, token_counts
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kv_cache import KVModel
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.models.model_loading import truncated_copy
from tests.helpers import tiny_target
from tests.oracles import hf_greedy

IDS = torch.tensor([0, 3, 5, 17, 40, 41, 42, 99, 127])


def test_frequent_ids_takes_the_most_counted_plus_the_special_ones():
    counts = torch.tensor([5, 0, 9, 9, 1, 7])
    # top 3 by count, ties by id: 2, 3 (9 each), then 5 (7); special id 1 always kept
    assert frequent_ids(counts, 3, always=[1]).tolist() == [1, 2, 3, 5]
    with pytest.raises(ValueError, match="n >= 1"):
        frequent_ids(counts, 0)


def test_pruned_logits_are_the_full_heads_rows_and_the_original_is_untouched():
    target = tiny_target()
    small = truncated_copy(target, 1).model
    head_before = small.get_output_embeddings()
    pruned = pruned_copy(small, IDS)
    assert small.get_output_embeddings() is head_before and not hasattr(small, "vocab_map")
    assert pruned.get_output_embeddings().weight.shape[0] == len(IDS)
    prompt = [[1, 2, 3, 4, 5, 6]]
    full_kv, pruned_kv = KVModel(small), KVModel(pruned, vocab_map=pruned.vocab_map, vocab_size=128)
    full_kv.reset(1)
    pruned_kv.reset(1)
    (full,) = full_kv.extend_chain(prompt)
    (part,) = pruned_kv.extend_chain(prompt)
    assert part.shape == full.shape
    outside = torch.ones(128, dtype=torch.bool)
    outside[IDS] = False
    assert torch.isneginf(part[..., outside]).all()
    torch.testing.assert_close(part[..., IDS], full[..., IDS], rtol=0, atol=1e-6)


def test_greedy_through_a_pruned_draft_equals_hf():
    target = tiny_target()
    small = truncated_copy(target, 1).model
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 128, (9,), generator=g).tolist() for _ in range(3)]
    for lower in (None, KatzNgramDrafter(128, k=2)):
        drafter = ModelDrafter(pruned_copy(small, IDS), k=4, lower=lower)
        res = SpeculativeDecoder(target.model, drafter, SamplingConfig(temperature=0.0)).generate(prompts, 24)
        for p, seq in zip(prompts, res.sequences):
            assert seq.output_ids == hf_greedy(target.model, p, 24)


def test_token_counts_are_cached(tmp_path):
    class Tok:
        name_or_path = "bytes"
        calls = 0

        def __len__(self):
            return 256

        def __call__(self, text, add_special_tokens=False):
            Tok.calls += 1
            return {"input_ids": list(text.encode()[:1000])}

    a = token_counts(Tok(), 256, tmp_path, max_bytes=20_000)
    calls = Tok.calls
    assert calls > 0 and a.sum() > 0 and a[ord("e")] > a[ord("Q")]
    b = token_counts(Tok(), 256, tmp_path, max_bytes=20_000)
    assert Tok.calls == calls and torch.equal(a, b)  # read back, not recounted
