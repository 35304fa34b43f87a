"""A job assembled in one place: the loaded target, the draft hierarchy, the kernel plan,
the method's and plain decoding's decoders, the ``tree=auto`` choice and the warm-up.

``assemble_job(plan, warmup_text)`` takes the checked plan (``app/plan.JobPlan``, or any
object with the same fields: this room reads its fields, never the config) and returns a
``Job`` ready to time: ``tree=auto`` is resolved here, explicitly and before anything is
timed (``resolve_tree``, through ``tuning.auto_tree.resolve_auto_tree``), and the drafter's
tree fixed; the engine never calls into the tuning room. ``run`` (the sweep job),
``generate`` (one prompt) and the benchmarks' ``tree=auto`` resolution all go through here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol
from collections.abc import Callable

import torch

from stagedspec.drafters.bypass import BypassDrafter
from stagedspec.drafters.hierarchy import build_hierarchy, hierarchy_key
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.drafter_protocol import Drafter
from stagedspec.engine.kernels import KernelChoice
from stagedspec.engine.llama_cpp_kv import LlamaCppKV
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.models.chat_text import encode, eos_token_ids
from stagedspec.models.llama_cpp_model import gguf_path, load_llama_cpp_cached
from stagedspec.models.model_loading import LoadedModel, ModelSpec, load_cached
from stagedspec.tuning.auto_tree import resolve_auto_tree
from stagedspec.tuning.kernel_calibration import kernel_plan
from stagedspec.tuning.tree_program import Choice

WARMUP_PROMPT_TOKENS = 32
"""The warm-up decodes the last tokens of one prompt ..."""
WARMUP_NEW_TOKENS = 4
"""... for a few new tokens: enough for the first forwards to allocate."""


class JobInputs(Protocol):
    """The fields of a checked plan (``app/plan.JobPlan``) a job's assembly reads."""

    target: Any  # ModelSpec
    levels: list[Any]
    sampling: SamplingConfig
    kernels: str
    max_new_tokens: int
    baseline: bool
    warmup: bool


class NoRoomForPrompt(ValueError):
    """``max_new_tokens`` plus the draft depth fill the target's whole context."""


@dataclass
class Job:
    """An assembled job, ready to time."""

    target: LoadedModel
    drafter: Drafter | None
    """The hierarchy's top level (None: plain decoding is the method)."""
    kernels: KernelChoice
    """The kernel plan of every forward, the method's and the baseline's alike."""
    method: SpeculativeDecoder
    baseline: SpeculativeDecoder | None
    """Plain decoding through the same kernel plan, when the job compares the method with it
    (``baseline`` on and at least one level); None otherwise."""
    max_prompt: int
    """The longest prompt that leaves room for ``max_new_tokens`` and the deepest draft."""
    tree_choice: Choice | None
    """``tree=auto``'s choice (already applied to the drafter); None without ``tree=auto``."""
    load_s: float
    """Seconds spent loading the models and building the hierarchy."""
    draft_models: dict[str, str]
    """Each level's name -> the name of the model it drafts with (its class name for a
    level without one)."""

    @property
    def decoders(self) -> tuple[SpeculativeDecoder, ...]:
        """The decoders the job runs: the method's, then the baseline's if any."""
        return (self.method,) if self.baseline is None else (self.method, self.baseline)


def assemble_job(
    plan: JobInputs, warmup_text: str | None = None, loader: Callable[[ModelSpec], LoadedModel] = load_cached
) -> Job:
    """Load, build, calibrate the kernels, make the decoders, check the context has room
    for a prompt, resolve ``tree=auto`` and warm up (when ``plan.warmup`` and a
    ``warmup_text`` is given): everything a job does before it times anything."""
    t0 = time.perf_counter()
    loaded: list[tuple[ModelSpec, LoadedModel]] = []

    def load(spec: ModelSpec) -> LoadedModel:
        loaded.append((spec, loader(spec)))
        return loaded[-1][1]

    target = load(plan.target)
    drafter = build_hierarchy(plan.levels, target, load)  # checks tokenizers, naming the level
    load_s = time.perf_counter() - t0
    draft_models = {lv.name: level_model_name(lv, target, loaded) for lv in plan.levels}
    kernels = kernel_plan(target, plan.kernels)
    if getattr(plan.target, "backend", "torch") == "torch":  # the curve times torch's GEMMs, not llama.cpp's
        price_by_curve(drafter, kernels.step_curve)
    method, baseline = make_decoders(
        target, drafter, plan.sampling, kernels, with_baseline=plan.baseline and drafter is not None
    )
    max_prompt = room_for_prompt(target, method, plan.max_new_tokens)  # before tree=auto resolves, as ever
    choice = resolve_tree(drafter, target, plan.sampling, kernels, hierarchy_key(plan.levels))
    job = Job(target, drafter, kernels, method, baseline, max_prompt, choice, load_s, draft_models)
    if plan.warmup and warmup_text is not None:
        warm_up(job, warmup_text, plan.max_new_tokens)
    return job


def price_by_curve(drafter: Drafter | None, curve: tuple[float, ...]) -> None:
    """Give every router in ``drafter``'s levels that asks for it (``cost_curve``) the target's
    calibrated cost curve (``BypassDrafter.use_step_curve``; an empty curve leaves the linear price)."""
    d = drafter
    while d is not None:
        if isinstance(d, BypassDrafter) and d.cost_curve and curve:
            d.use_step_curve(curve)
        d = getattr(d, "lower", None)


def level_model_name(level: Any, target: LoadedModel, loaded: list[tuple[ModelSpec, LoadedModel]]) -> str:
    """The name of the model a level drafts with: the loaded model's, a truncated copy's
    (``truncated_copy``'s name), or the level's class name when it has no model."""
    spec = level.spec() if hasattr(level, "spec") else None
    if spec is None:
        return type(level).__name__
    if spec.source == "truncated":
        return f"{target.name}-first{spec.layers}"  # truncated_copy's name
    return next(model.name for s, model in loaded if s == spec)  # build_hierarchy loaded it


def make_decoders(
    target: LoadedModel, drafter: Drafter | None, sampling: SamplingConfig, kernels: KernelChoice, with_baseline: bool
) -> tuple[SpeculativeDecoder, SpeculativeDecoder | None]:
    """The method's decoder and (``with_baseline``) plain decoding's, sharing every kernel choice."""
    eos = eos_token_ids(target)
    kv = target_cache(target)  # one llama.cpp context serves both decoders (each generate resets it)
    method = SpeculativeDecoder(
        target.model, drafter, sampling, eos, context_length=target.context_length, plan=kernels, kv=kv
    )
    baseline = None
    if with_baseline:
        baseline = SpeculativeDecoder(
            target.model, None, sampling, eos, context_length=target.context_length, plan=kernels, kv=kv
        )
    return method, baseline


def target_cache(target: LoadedModel) -> LlamaCppKV | None:
    """The target's cache on llama.cpp for ``backend=llama_cpp`` (None: the torch model's own)."""
    spec = target.spec
    if getattr(spec, "backend", "torch") != "llama_cpp":
        return None
    handle = load_llama_cpp_cached(
        gguf_path(spec), threads=torch.get_num_threads(), gpu=spec.device == "cuda", vocab_size=target.vocab_size
    )
    return LlamaCppKV(handle)


def room_for_prompt(target: LoadedModel, method: SpeculativeDecoder, max_new_tokens: int) -> int:
    """The longest prompt the target's context holds beside ``max_new_tokens`` and the
    method's deepest draft; ``NoRoomForPrompt`` when that is none."""
    depth = method.draft_depth
    max_prompt = target.context_length - max_new_tokens - depth
    if max_prompt < 1:
        raise NoRoomForPrompt(
            f"max_new_tokens={max_new_tokens} plus draft depth {depth} leaves no room for a prompt in "
            f"{target.name}'s context of {target.context_length} tokens"
        )
    return max_prompt


def resolve_tree(
    drafter: Drafter | None, target: LoadedModel, sampling: SamplingConfig, kernels: KernelChoice, key: Any
) -> Choice | None:
    """``tree=auto``: calibrate (or read the cached calibration, in the target's cache
    directory, under the hierarchy's ``key``) and choose now, outside every timed decode,
    fixing the drafter's tree (``tuning.auto_tree.resolve_auto_tree``). None when the top
    level has no auto tree."""
    return resolve_auto_tree(drafter, target, sampling, kernels, hierarchy_key=key)


def warm_up(job: Job, text: str, max_new_tokens: int) -> None:
    """One short untimed decode per decoder: first forwards allocate; keep that out of
    either method's time."""
    first = encode(job.target, text, [])[-min(WARMUP_PROMPT_TOKENS, job.max_prompt) :]
    for dec in job.decoders:
        dec.generate([first], min(WARMUP_NEW_TOKENS, max_new_tokens))
