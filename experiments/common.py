"""Shared set-up of the benchmarks: the embedded target and real dev prompts."""

from __future__ import annotations

import torch

from stagedspec.models.chat_text import encode_prompt
from stagedspec.models.model_loading import LoadedModel, ModelSpec, load_model
from stagedspec.prompts.prompt_sets import balanced, default_data_path, load_questions

CATEGORIES = ["summarization", "qa", "translation", "math_reasoning", "rag", "writing", "coding", "extraction"]


def add_common_args(ap) -> None:
    ap.add_argument("--prompts", type=int, default=6, help="dev prompts, one per category in turn")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--json", default=None, help="also write the results here")


def setup(args) -> tuple[LoadedModel, list[list[int]], list[str]]:
    torch.set_num_threads(args.threads)
    target = load_model(ModelSpec(source="embedded", device=args.device, dtype=args.dtype))
    per_cat = -(-args.prompts // len(CATEGORIES))
    qs = balanced(load_questions(default_data_path(), categories=CATEGORIES), per_cat)
    qs = sorted(qs, key=lambda q: (CATEGORIES.index(q.category), q.question_id))
    # round-robin over categories so a few prompts still span several of them
    order = sorted(range(len(qs)), key=lambda i: (sum(q.category == qs[i].category for q in qs[:i]),
                                                  CATEGORIES.index(qs[i].category)))
    qs = [qs[i] for i in order][: args.prompts]
    prompts = [encode_prompt(target.tokenizer, q.turns[:1]) for q in qs]
    return target, prompts, [q.category for q in qs]


def hf_generate(model, prompt: list[int], n: int, eos: list[int] | None = None, temperature: float = 0.0,
                **kw) -> list[int]:
    """Hugging Face ``generate``: greedy at temperature 0, else sampled (no top-k/top-p)."""
    ids = torch.tensor([prompt], device=model.device)
    sample = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else \
        {"do_sample": False}
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, eos_token_id=eos or None,
                         pad_token_id=0, **sample, **kw)
    new = out[0, len(prompt):].tolist()
    stop = next((i for i, t in enumerate(new) if eos and t in eos), None)
    return new if stop is None else new[: stop + 1]


def geomean_ci(ratios: list[float], n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Geometric mean of per-prompt ratios and a bootstrap 95% interval (prompts resampled)."""
    logs = torch.tensor(ratios, dtype=torch.float64).log()
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, len(logs), (n_boot, len(logs)), generator=g)
    boots = logs[idx].mean(1).exp().sort().values
    return float(logs.mean().exp()), float(boots[int(0.025 * n_boot)]), float(boots[int(0.975 * n_boot) - 1])


def per_token_alpha(sequences) -> float:
    """accepted / (accepted + rejections): each round that stopped before the end of its
    draft had one rejection; a consistent estimate of per-token acceptance for chains."""
    acc = rej = 0
    for s in sequences:
        for r in s.rounds:
            acc += r.accepted_depth
            rej += r.accepted_depth < r.tree_nodes
    return acc / (acc + rej) if acc + rej else 0.0
