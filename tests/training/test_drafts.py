"""Trained drafts (models/draft_files.py, drafters/feature.py, training/): exact decoding
through them, the weights file and its refusals, the n-gram corpus counts, and a short
run of the distillation recipe that must beat the untrained draft."""

from __future__ import annotations

import pytest
import torch

from stagedspec.drafters import KatzNgramDrafter, ModelDrafter
from stagedspec.drafters.feature import FeatureDrafter
from stagedspec.drafters.ngram_lm import KatzBackoffLM, read_corpus, write_corpus
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kernels import KernelChoice
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import TreeShape
from stagedspec.models.draft_files import build_draft, load_draft, read_meta, save_draft
from stagedspec.training.corpus import generate_corpus, target_features, vocab_subset
from stagedspec.training.distillation import TrainConfig, agreement, train_draft
from tests.helpers import tiny_target
from tests.oracles import (
    N_NEW,
    V,
    chi2,
    chi2_critical,
    draw_positions_3_4,
    exact_positions_3_4,
    hf_reference,
    peaked,
    tiny_prompts,
    trained_drafts,
)

FAST = KernelChoice(
    name="test", linear=("linear", "mkldnn", "linear", "mkl4"), gqa_packing=True, slot_cache=True, lean_layers=True
)


@pytest.mark.parametrize("plan", [None, FAST], ids=["hf", "fast"])
@pytest.mark.parametrize(
    "make",
    [
        lambda f, l, V: FeatureDrafter(f, k=4),
        lambda f, l, V: FeatureDrafter(f, tree=TreeShape.parse({"widths": [2, 2, 1]})),
        lambda f, l, V: FeatureDrafter(f, tree=TreeShape.parse({"dynamic": {"budget": 8, "topk": 3, "depth": 4}})),
        lambda f, l, V: ModelDrafter(l, k=3),
        lambda f, l, V: ModelDrafter(l, k=4, lower=KatzNgramDrafter(V, k=2)),
    ],
    ids=["feature-chain", "feature-tree", "feature-dynamic", "layers", "ngram>layers"],
)
def test_trained_drafts_greedy_equal_hf(make, plan):
    target = tiny_target()
    feature, layers = trained_drafts()
    kw = {} if plan is None else {"plan": plan}
    for batch in (1, 5):
        dec = SpeculativeDecoder(target.model, make(feature, layers, target.vocab_size), SamplingConfig(), **kw)
        res = dec.generate(tiny_prompts(8)[:batch], N_NEW)
        assert [s.output_ids for s in res.sequences] == [list(r) for r in hf_reference(8)][:batch]


def test_feature_draft_must_draft_for_the_target():
    target = tiny_target()
    feature, layers = trained_drafts()
    with pytest.raises(ValueError, match="hidden states"):
        SpeculativeDecoder(target.model, ModelDrafter(layers, k=2, lower=FeatureDrafter(feature, k=2)))


@pytest.mark.parametrize("tree", [None, {"widths": [2, 2, 1]}], ids=["chain", "tree"])
def test_feature_draft_feeds_each_verified_token_once(tree, monkeypatch):
    """The tail fed with the target's real features stays cached: over a whole answer the
    draft is fed each context slot once (plus the one it re-feeds when a round's tail would
    be empty), not the whole context every round (issue 21 item 2)."""
    target = tiny_target()
    feature, _ = trained_drafts()
    fed = []
    original = FeatureDrafter._feed_tails

    def counting(self, contexts, features):
        out = original(self, contexts, features)
        fed.append(sum(n + 1 for n in out[2]))
        return out

    monkeypatch.setattr(FeatureDrafter, "_feed_tails", counting)
    shape = None if tree is None else TreeShape.parse(tree)
    drafter = FeatureDrafter(feature, k=4) if shape is None else FeatureDrafter(feature, tree=shape)
    prompt = tiny_prompts(8)[5]
    res = SpeculativeDecoder(target.model, drafter, SamplingConfig()).generate([prompt], N_NEW)
    assert res.sequences[0].output_ids == list(hf_reference(8)[5])
    rounds = len(fed)
    assert rounds > 3
    # slots are context[1:]; the last round's context lacks at most the final round's tokens
    assert sum(fed) <= len(prompt) - 1 + N_NEW, (sum(fed), fed)


def test_weights_file_round_trip_and_refusals(tmp_path):
    target = tiny_target()
    feature, _ = trained_drafts()
    path = save_draft(feature, tmp_path / "f.safetensors")
    again = load_draft(path, target.model)
    for k, v in feature.trainable_state().items():  # stored in float16
        torch.testing.assert_close(again.trainable_state()[k], v.half().float())
    assert torch.equal(again.vocab_map, feature.vocab_map) and read_meta(path).design == "feature"
    # another target: another hidden size and vocabulary
    other = tiny_target(vocab=64, seed=3).model
    with pytest.raises(ValueError, match=r"f\.safetensors.*another target.*vocab_size 128 \(file\) vs 64"):
        load_draft(path, other)
    with pytest.raises(FileNotFoundError, match="nope.safetensors"):
        load_draft(tmp_path / "nope.safetensors", target.model)
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="cut.safetensors.*(truncated|unreadable)"):
        load_draft(cut, target.model)
    # a vocabulary subset that does not fit the target
    bad = build_draft(target.model, "feature", 1, torch.arange(10))
    bad.vocab_map = torch.arange(120, 130)
    save_draft(bad, tmp_path / "bad.safetensors")
    with pytest.raises(ValueError, match=r"bad.safetensors.*vocab_map.*\[0, 128\).*120\.\.129"):
        load_draft(tmp_path / "bad.safetensors", target.model)


def test_ngram_corpus_counts_are_shared_not_copied(tmp_path):
    import random

    rng = random.Random(0)
    corpus = [rng.randrange(30) for _ in range(400)]
    row = [rng.randrange(30) for _ in range(50)]
    write_corpus(tmp_path / "c.safetensors", corpus, 30)
    assert read_corpus(tmp_path / "c.safetensors", 30) == corpus
    with pytest.raises(ValueError, match="vocabulary of 30 tokens; the target has 64"):
        read_corpus(tmp_path / "c.safetensors", 64)
    base = KatzBackoffLM(30, 3)
    base.update(corpus)
    n_base = {k: len(base._cont[k]) for k in (2, 3)}
    alone = KatzBackoffLM(30, 3)
    alone.update(row)
    over = KatzBackoffLM(30, 3, base=base)
    over.update(row)
    for k in (2, 3):  # every history's continuation counts are the sum of both streams'
        for h in set(base._cont[k]) | set(alone._cont[k]):
            merged, c_h = over._continuations(k, h)
            want: dict[int, int] = dict(base._cont[k].get(h, {}))
            for w, c in alone._cont[k].get(h, {}).items():
                want[w] = want.get(w, 0) + c
            assert merged == want and c_h == sum(want.values())
    p = over.distribution(row[-2:])
    assert abs(float(p.sum()) - 1.0) < 1e-5 and float(p.min()) > 0
    assert {k: len(base._cont[k]) for k in (2, 3)} == n_base  # the row's counts never reach the base


# ---------------------------------------------------------------------------- sampling
@pytest.mark.parametrize(
    "factory,cfg",
    [
        (lambda: FeatureDrafter(peaked()[1], k=3), SamplingConfig(temperature=1.0, seed=21)),
        (
            lambda: FeatureDrafter(peaked()[1], tree=TreeShape.parse({"widths": [2, 2]})),
            SamplingConfig(temperature=0.7, top_p=0.9, seed=22),
        ),
        (
            lambda: ModelDrafter(peaked()[2], k=3, lower=KatzNgramDrafter(V, k=2, order=2)),
            SamplingConfig(temperature=1.0, seed=23),
        ),
    ],
    ids=["feature-chain", "feature-tree-t0.7-topp", "ngram>layers"],
)
def test_trained_drafts_sample_the_target_at_positions_3_and_4(factory, cfg):
    """Chi-square (N = 6000, alpha = 1e-4) of the joint of the 3rd and 4th tokens: drafts of
    3 tokens, so these come from accepted drafts, residuals and bonus tokens alike."""
    stat, df = chi2(draw_positions_3_4(factory, cfg, 6000), exact_positions_3_4(cfg))
    assert stat < chi2_critical(df), f"chi2={stat:.1f} df={df} crit={chi2_critical(df):.1f}"


# ---------------------------------------------------------------------------- the recipe
def _tiny_corpus(n: int, seed: int):
    target = tiny_target()
    g = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(0, 128, (int(torch.randint(4, 16, (1,), generator=g)),), generator=g).tolist() for _ in range(n)
    ]
    answers = generate_corpus(target.model, prompts, 0.0, 48, 16, seed, [])
    seqs = [p + a for p, a in zip(prompts, answers)]
    return seqs, [len(p) for p in prompts], target_features(target.model, seqs)


@pytest.mark.parametrize("design", ["feature", "layers"])
def test_training_improves_agreement_and_acceptance(design):
    """A short run of the recipe on a tiny target: held-out top-1 agreement and the
    engine's acceptance both rise above the untrained draft's."""
    target = tiny_target()
    seqs, starts, feats = _tiny_corpus(80, 0)
    held, held_starts, held_feats = _tiny_corpus(12, 1)
    subset = vocab_subset([s[st:] for s, st in zip(seqs, starts)], 96, 128)
    torch.manual_seed(0)
    draft = build_draft(target.model, design, 1, subset)

    def accept_rate() -> float:
        drafter = FeatureDrafter(draft, k=3) if design == "feature" else ModelDrafter(draft, k=3)
        res = SpeculativeDecoder(target.model, drafter, SamplingConfig()).generate(
            [s[:st] for s, st in zip(held, held_starts)], 32
        )
        return res.summary()["acceptance_rate"]

    before, acc_before = agreement(draft, target.model, held, held_feats, held_starts), accept_rate()
    state = train_draft(draft, seqs, feats, TrainConfig(epochs=6, batch_tokens=1024, lr=3e-3, checkpoint_every=10**6))
    after, acc_after = agreement(draft, target.model, held, held_feats, held_starts), accept_rate()
    assert state.losses[-1] < state.losses[0]
    assert after > before + 0.05, (before, after)
    assert acc_after > acc_before, (acc_before, acc_after)


def test_training_resumes_from_its_checkpoint(tmp_path):
    """Killed after its last checkpoint, a run resumes there and ends where an
    uninterrupted run ends."""
    target = tiny_target()
    seqs, _, feats = _tiny_corpus(30, 2)
    cfg = TrainConfig(epochs=2, batch_tokens=512, lr=1e-3, checkpoint_every=3)

    def fresh():
        torch.manual_seed(0)
        return build_draft(target.model, "layers", 1, torch.arange(128))

    whole = fresh()
    train_draft(whole, seqs, feats, cfg)
    part = fresh()

    class Stop(Exception):
        pass

    def stop_at_4(step, metrics):
        if step == 4:
            raise Stop

    with pytest.raises(Stop):
        train_draft(part, seqs, feats, cfg, checkpoint=tmp_path / "c.pt", on_step=stop_at_4)
    resumed = fresh()
    state = train_draft(resumed, seqs, feats, cfg, checkpoint=tmp_path / "c.pt")
    assert state.step == state.total_steps
    for k, v in whole.trainable_state().items():
        torch.testing.assert_close(resumed.trainable_state()[k], v, atol=1e-5, rtol=1e-4)


def test_feature_drafts_read_the_targets_true_features():
    """At every round the draft's distribution after the context equals what it computes
    offline from the target's true hidden states of the final text: the decoder hands
    the feature draft the right states (tail and accepted path), and cache entries made
    from its own provisional features never linger."""
    target = tiny_target()
    feature, _ = trained_drafts()
    roots: list[tuple[int, torch.Tensor]] = []  # (context length, root logits)

    class Recording(FeatureDrafter):
        def _feed_tails(self, contexts, features):
            logits, states, slots = super()._feed_tails(contexts, features)
            roots.extend((len(c), lg) for c, lg in zip(contexts, logits))
            return logits, states, slots

    prompt = tiny_prompts(3)[2]
    seq = SpeculativeDecoder(target.model, Recording(feature, k=3), SamplingConfig()).generate([prompt], N_NEW)
    full = prompt + seq.sequences[0].output_ids
    with torch.no_grad():
        f = target.model.get_decoder()(input_ids=torch.tensor([full])).last_hidden_state[0]  # float32
        inputs = feature.feature_inputs(torch.tensor([full[1:]]), f[None, :-1])
        out = feature.lm.model(inputs_embeds=inputs).last_hidden_state[0]
        offline = feature.lm.lm_head(out)  # slot t: logits over the subset for token t + 2
    assert len(roots) > 5 and any(r.accepted_depth > 0 for r in seq.sequences[0].rounds)
    for length, logits in roots:
        torch.testing.assert_close(logits[feature.vocab_map], offline[length - 2], atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_recipe_short_run_on_the_embedded_target(embedded_model, tmp_path):
    """The shipped drafts' recipe (``distillation.distill``, what ``python -m
    stagedspec.distill`` runs), cut to a few prompts and steps: it trains from scratch,
    beats the untrained draft on held-out answers, and writes files the level loads."""
    from stagedspec.training.distillation import DistillSpec, distill
    from stagedspec.training.corpus import CorpusSpec, corpus_dir
    from stagedspec.drafters.hierarchy import NgramLevel, TrainedLevel

    seen: dict[str, float] = {}
    # 32 answers of 40 tokens, 8 held out (~300 held-out tokens: one agreement step is 0.3%)
    spec = DistillSpec(
        corpus=CorpusSpec(prompts=32, temperatures=(0.0,), max_new_tokens=40, batch_size=16),
        designs={"feature": 1},
        vocab_size=2048,
        heldout=0.25,
        train=TrainConfig(epochs=12, batch_tokens=1024, lr=2e-3, warmup_steps=4),
    )
    paths = distill(
        embedded_model,
        spec,
        tmp_path / "out",
        tmp_path / "cache",
        on_metrics=lambda m, step: seen.update(m) if step is None else None,
    )
    assert seen["feature/heldout_agreement"] > seen["feature/heldout_agreement_untrained"] + 0.05, seen
    meta = read_meta(paths["feature"])
    assert meta.metrics["heldout_agreement"] == seen["feature/heldout_agreement"] and meta.n_layers == 1
    import stagedspec
    import transformers

    prov = meta.recipe["provenance"]  # enough to rebuild the file (issue 21 item 10)
    assert prov["stagedspec"] == stagedspec.__version__ and prov["torch"] == torch.__version__
    assert prov["transformers"] == transformers.__version__ and prov["threads"] == torch.get_num_threads()
    assert prov["kernels"] == "hf" and prov["dtype"] == "float32" and "optimistic" in prov["selection"]
    assert prov["commit"] is None or len(prov["commit"]) == 40
    assert prov["corpus_dir"] == corpus_dir(tmp_path / "cache", embedded_model.name, spec.corpus).name
    assert corpus_dir(tmp_path, "t", spec.corpus, "fast") != corpus_dir(tmp_path, "t", spec.corpus, "hf")
    drafter = TrainedLevel(weights=str(paths["feature"]), k=3).build(None, embedded_model, None)
    ngram = NgramLevel(corpus=str(paths["ngram"])).build(None, embedded_model, None)
    assert drafter.wants_features and ngram.base.num_tokens > 100
