"""Shared set-up of the benchmarks: the embedded target and real dev prompts."""

from __future__ import annotations

import torch

from stagedspec.data import balanced, default_data_path, load_questions
from stagedspec.models import LoadedModel, ModelSpec, load_model
from stagedspec.text import encode_prompt

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


def hf_generate(model, prompt: list[int], n: int, **kw) -> list[int]:
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0, **kw)
    return out[0, len(prompt):].tolist()
