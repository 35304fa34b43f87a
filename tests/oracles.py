"""The oracles the tests share: what the right output is, computed without the code under
test, and the fixed inputs the tests compare on. Test files import these from here (and
the tiny models from ``helpers.py``), never from each other
(``tests/architecture/test_layers_imports.py`` checks it).

- **Greedy**: Hugging Face's own ``generate(do_sample=False)`` (``hf_greedy``) of the tiny
  target on ``tiny_prompts``: ``hf_reference``.
- **Sampling**: the chi-square test of the joint of emitted tokens against the exact joint,
  enumerated over every path through a peaked 8-token target (``statistics``, ``chi2``,
  ``chi2_critical``), with its power (below).
- **Trained drafts** around that peaked target (``peaked``, with the exact joint of the 3rd
  and 4th tokens) and around the tiny target (``trained_drafts``).
- **Kernels**: a position's logits through one row per forward and through one forward of
  several rows (``logits_by_row_count``).
- **Source**: every module a file imports (``imports``), for the architecture tests.
"""

from __future__ import annotations

import dataclasses

import ast
import functools
import math
from pathlib import Path

import torch

from stagedspec.drafters import ModelDrafter
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kernels import HF_KERNELS, KernelChoice
from stagedspec.engine.kv_cache import KVModel
from stagedspec.engine.sampling import SamplingConfig, probabilities
from stagedspec.models.draft_files import build_draft
from stagedspec.models.model_loading import truncated_copy

from .helpers import tiny_target

ROOT = Path(__file__).resolve().parents[1]
"""The repository."""


# ---------------------------------------------------------------------------- greedy: HF's generate
N_NEW = 40


def hf_greedy(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    out = model.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        max_new_tokens=n,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    return out[0, len(prompt) :].tolist()


def tiny_prompts(n: int, seed: int = 3) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = 3 + 7 * i % 23
        base = torch.randint(0, 128, (length,), generator=g).tolist()
        out.append(base + base[: length // 2])  # repeats give n-gram levels something to find
    return out


@functools.cache
def hf_reference(n: int) -> tuple[tuple[int, ...], ...]:
    """HF greedy's ``N_NEW`` tokens after each of the first ``n`` tiny prompts, on the tiny target."""
    target = tiny_target()
    return tuple(tuple(hf_greedy(target.model, p, N_NEW)) for p in tiny_prompts(n))


# ---------------------------------------------------------------------------- sampling: chi-square
# Set-up: a tiny-vocabulary random target (8 tokens, peaked logits) and a deliberately
# different draft (its first layer only: acceptance about 34%). Each row of a large batch
# is an independent sample of 4 tokens. Two chi-square goodness-of-fit tests per case, of
# the joint of tokens (1, 2) and of tokens (3, 4), against the exact joints, computed by
# enumerating all 8^4 paths through the target; alpha = 1e-4 per case, Bonferroni-split
# between the two pairs.
#
# Power: ``test_mutant_is_caught`` (tests/drafters/test_sampling_exact.py) runs broken
# rules, each one fault, with the same N and asserts that a pair's statistic exceeds its
# critical value; the measured statistics are in the mutants' comments (critical values
# 64.1 for tokens 1-2, 26 degrees of freedom, and 84.8 for tokens 3-4, 40; honest cases
# measured 1-59 against their critical values).
V = 8
PROMPT = [1, 5, 2, 5, 2]
N_TOKENS = 4
PAIRS = ((0, 1), (2, 3))
"""Token positions (0-based) whose joint distribution is tested."""
ALPHA_Z = 3.719  # one-sided normal quantile for alpha = 1e-4
BONFERRONI_Z = 3.891  # ... for alpha = 1e-4 / 2: two pairs per case
N = 4000
T1 = SamplingConfig(temperature=1.0, seed=11)


def chi2_critical(df: int, z: float = ALPHA_Z) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (accurate to ~1% here)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@functools.cache
def chi2_models():
    """(target, draft) of the chi-square set-up."""
    target = tiny_target(vocab=V, layers=2, seed=0, init=0.3)
    # its first layer + head: a different q that still agrees ~35% of the time, so both
    # acceptances and residual draws happen often
    draft = truncated_copy(target, 1).model
    return target, draft


@functools.cache
def exact_pairs(cfg: SamplingConfig) -> dict[tuple[int, int], torch.Tensor]:
    """For each pair of positions, the exact joint of the emitted tokens there, from the
    target's processed distribution along all V^4 paths."""
    target = chi2_models()[0].model
    paths = torch.zeros(1, 0, dtype=torch.long)
    weight = torch.ones(1)
    with torch.no_grad():
        for _ in range(N_TOKENS):
            ctx = torch.cat([torch.tensor(PROMPT).expand(len(paths), -1), paths], 1)
            nxt = probabilities(target(ctx).logits[:, -1], cfg)  # [paths, V]
            weight = (weight[:, None] * nxt).flatten()
            paths = torch.cat([paths.repeat_interleave(V, 0), torch.arange(V).repeat(len(paths))[:, None]], 1)
    out = {}
    for i, j in PAIRS:
        joint = torch.zeros(V * V)
        joint.index_add_(0, paths[:, i] * V + paths[:, j], weight)
        out[(i, j)] = joint
    return out


def chi2(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    n = counts.sum()
    expected = probs * n
    big = expected >= 5
    stat = (((counts[big] - expected[big]) ** 2) / expected[big]).sum()
    rest_obs, rest_exp = counts[~big].sum(), expected[~big].sum()
    df = int(big.sum()) - 1
    if rest_exp > 0:
        stat = stat + (rest_obs - rest_exp) ** 2 / rest_exp
        df += 1
    return float(stat), df


def draw(
    drafter_factory, cfg: SamplingConfig, n: int, batch: int = 1000, plan: KernelChoice = HF_KERNELS
) -> dict[tuple[int, int], torch.Tensor]:
    """Counts of each pair of emitted tokens over ``n`` rows, ``batch`` rows per decode,
    every forward (target and draft levels) through ``plan``."""
    target, _ = chi2_models()
    counts = {pair: torch.zeros(V * V) for pair in PAIRS}
    for i in range(n // batch):
        dec = SpeculativeDecoder(
            target.model,
            drafter_factory(),
            dataclasses.replace(cfg, seed=cfg.seed + i),
            plan=plan,
        )
        for s in dec.generate([PROMPT] * batch, N_TOKENS).sequences:
            for a, b in PAIRS:
                counts[(a, b)][s.output_ids[a] * V + s.output_ids[b]] += 1
    return counts


def statistics(
    factory, cfg: SamplingConfig, n: int | None = None, plan: KernelChoice = HF_KERNELS
) -> list[tuple[str, float, int, float]]:
    """(pair, chi2, df, Bonferroni critical value) for each tested pair; the exact joints
    always come from Hugging Face's own forward, whatever ``plan`` the decoding uses."""
    exact, counts = exact_pairs(cfg), draw(factory, cfg, n or N, getattr(factory, "batch", 1000), plan)
    out = []
    for pair in PAIRS:
        stat, df = chi2(counts[pair], exact[pair])
        out.append((f"tokens {pair[0] + 1}-{pair[1] + 1}", stat, df, chi2_critical(df, BONFERRONI_Z)))
    return out


@functools.cache
def lower_model():
    """A third random model for a staged level's lower stage (batched, unlike an n-gram
    LM per row, so the staged cases cost what the others do; ``test_drafts.py`` tests an
    n-gram lower stage at tokens 3-4)."""
    return tiny_target(vocab=V, layers=1, seed=3, init=0.3).model


def staged_drafter():
    """Inner rounds of at most 3 tokens fill a draft of 4: most end inside it, on a bonus
    or a residual token, so the staged level's q for those tokens is tested."""
    return ModelDrafter(chi2_models()[1], k=4, lower=ModelDrafter(lower_model(), k=2, name="inner"))


# ---------------------------------------------------------------------------- trained drafts
@functools.cache
def trained_drafts():
    """(feature, layers) drafts of the tiny target, untrained."""
    target = tiny_target()
    torch.manual_seed(0)
    subset = torch.arange(0, 128, 2)  # half the vocabulary: q is 0 on the odd ids
    return build_draft(target.model, "feature", 1, subset), build_draft(target.model, "layers", 1, torch.arange(128))


@functools.cache
def peaked():
    """The sampling test's target (8 tokens, peaked) and drafts around it."""
    target = tiny_target(vocab=V, layers=2, seed=0, init=0.3)
    torch.manual_seed(1)
    feature = build_draft(target.model, "feature", 1, torch.tensor([0, 1, 2, 3, 5, 6]))  # q = 0 on 4 and 7
    layers = build_draft(target.model, "layers", 1, torch.arange(V))
    return target, feature, layers


def exact_positions_3_4(cfg: SamplingConfig) -> torch.Tensor:
    """The exact joint of the 3rd and 4th emitted tokens, by enumerating all 8^4 paths."""
    target = peaked()[0].model
    paths = torch.tensor([[a] for a in range(V)])
    weight = torch.ones(V)
    with torch.no_grad():
        p = probabilities(target(torch.tensor([PROMPT])).logits[0, -1], cfg)
        weight = p.clone()
        for _ in range(3):
            ctx = torch.cat([torch.tensor(PROMPT).expand(len(paths), -1), paths], 1)
            nxt = probabilities(target(ctx).logits[:, -1], cfg)  # [n, V]
            weight = (weight[:, None] * nxt).flatten()
            paths = torch.cat([paths.repeat_interleave(V, 0), torch.arange(V).repeat(len(paths))[:, None]], 1)
    joint = torch.zeros(V * V)
    joint.index_add_(0, paths[:, 2] * V + paths[:, 3], weight)
    return joint


def draw_positions_3_4(factory, cfg: SamplingConfig, n: int, batch: int = 1000) -> torch.Tensor:
    target = peaked()[0]
    counts = torch.zeros(V * V)
    for i in range(n // batch):
        dec = SpeculativeDecoder(
            target.model,
            factory(),
            dataclasses.replace(cfg, seed=cfg.seed + i),
        )
        for s in dec.generate([PROMPT] * batch, 4).sequences:
            counts[s.output_ids[2] * V + s.output_ids[3]] += 1
    return counts


# ---------------------------------------------------------------------------- kernels
def logits_by_row_count(model, plan: KernelChoice, prefix: list[int], toks: list[int]):
    """Logits after each of ``toks`` (over a cached ``prefix``): fed one row per forward
    (plain decoding), and all in one forward of len(toks) rows (a verification)."""
    one = KVModel(model, plan=plan)
    one.reset(1)
    one.extend_chain(one.sync([prefix]), want_last=False)
    single = torch.stack([one.extend_chain(one.sync([prefix + toks[: i + 1]]))[0][0] for i in range(len(toks))])
    many = KVModel(model, plan=plan)
    many.reset(1)
    many.extend_chain(many.sync([prefix]), want_last=False)
    tail = many.sync([prefix + toks])
    P = many.n_pending
    multi = many.extend(tail, [[-1] + list(range(P, P + len(toks) - 1))], [list(range(len(toks)))])[0]
    return single, multi


# ---------------------------------------------------------------------------- source
def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, source: str | None = None) -> set[str]:
    """Every module ``path`` imports, anywhere in the file, as absolute dotted names
    (``from a import b`` counts as ``a`` and ``a.b``: b may be a submodule). ``source``
    stands in for the file's text (a file that is not there, for the checks' own tests)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    text = path.read_text(encoding="utf-8") if source is None else source
    out: set[str] = set()
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)
    return out
