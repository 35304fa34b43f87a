"""The benchmarks' set-up: their shared command-line options, the target and the prompts
(picked round-robin over categories, so a few prompts still span several) and the draft
files they compare. A benchmark's ``tree=auto`` is resolved before timing as a job
resolves it (``job.resolve_tree``)."""

from __future__ import annotations

from pathlib import Path

import torch

from stagedspec.drafters.hierarchy import ASSETS, EMBEDDED_ASSETS
from stagedspec.models.chat_text import encode_prompt
from stagedspec.models.model_loading import LoadedModel, ModelSpec, load_model
from stagedspec.prompts.prompt_sets import balanced, default_data_path, load_questions
from stagedspec.prompts.splits import DEFAULT_SPLIT, SPLIT_CHOICES

CATEGORIES = ["summarization", "qa", "translation", "math_reasoning", "rag", "writing", "coding", "extraction"]


def add_common_args(ap) -> None:
    ap.add_argument("--prompts", type=int, default=6, help="dev prompts, one per category in turn")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--json", default=None, help="also write the results here")


def add_split_arg(ap) -> None:
    """``--split dev|test|all`` (default test): which split of the prompt set a benchmark
    measures (``stagedspec/prompts/splits.py``); settings are chosen on dev, results
    reported on test."""
    ap.add_argument(
        "--split",
        default=DEFAULT_SPLIT,
        choices=list(SPLIT_CHOICES),
        help="dev: the questions settings are tuned on; test: the disjoint ones results are "
        "reported on; all: both (stagedspec/prompts/splits.py)",
    )


def round_robin(questions: list, categories: list[str]) -> list:
    """``questions`` reordered round-robin over ``categories``: the first of each category
    (in that order), then the second of each, and so on; their order within a category kept."""
    seen: dict[str, int] = {}
    rank = []
    for q in questions:
        rank.append((seen.get(q.category, 0), categories.index(q.category)))
        seen[q.category] = seen.get(q.category, 0) + 1
    return [q for _, q in sorted(zip(rank, questions), key=lambda x: x[0])]


def setup(args) -> tuple[LoadedModel, list[list[int]], list[str]]:
    """The embedded target and ``args.prompts`` Spec-Bench dev prompts, round-robin over ``CATEGORIES``."""
    torch.set_num_threads(args.threads)
    target = load_model(ModelSpec(source="embedded", device=args.device, dtype=args.dtype))
    per_cat = -(-args.prompts // len(CATEGORIES))
    qs = balanced(load_questions(default_data_path(), categories=CATEGORIES), per_cat)
    qs = sorted(qs, key=lambda q: (CATEGORIES.index(q.category), q.question_id))
    qs = round_robin(qs, CATEGORIES)[: args.prompts]
    prompts = [encode_prompt(target.tokenizer, q.turns[:1]) for q in qs]
    return target, prompts, [q.category for q in qs]


def pick_prompts(questions: list, n: int) -> list:
    """``n`` questions balanced across categories, round-robin so a few span several."""
    cats = list(dict.fromkeys(q.category for q in questions))
    qs = balanced(questions, -(-n // len(cats))) if cats else []
    return round_robin(qs, cats)[:n]


def draft_files(folder: str | None) -> dict[str, Path]:
    """feature / layers / ngram files: those in ``folder`` (as ``distill`` writes them),
    else the ones shipped for the embedded target."""
    if folder:
        return {k: Path(folder) / f"{k}.safetensors" for k in ("feature", "layers", "ngram")}
    return {
        "feature": ASSETS / EMBEDDED_ASSETS["embedded-feature"],
        "layers": ASSETS / EMBEDDED_ASSETS["embedded-layers"],
        "ngram": ASSETS / EMBEDDED_ASSETS["embedded"],
    }
