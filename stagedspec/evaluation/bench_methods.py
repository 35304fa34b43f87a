"""The methods a benchmark times: ours (a fresh drafter per run through ``SpeculativeDecoder``)
and Hugging Face's (``generate``, assisted generation, prompt lookup, early exit), each as
a ``RunFn``; ``parse_ours`` reads the hierarchies of a packaged pair from one string."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import torch

from stagedspec.drafters import BypassDrafter, KatzNgramDrafter, ModelDrafter, PromptLookupDrafter
from stagedspec.drafters.bypass import RoutePrices
from stagedspec.drafters.feature import FeatureDrafter
from stagedspec.drafters.hierarchy import corpus_lm
from stagedspec.drafters.pruned_head import head_subset, pruned_copy
from stagedspec.drafters.recycle import RANKED_PATHS, RecycleDrafter
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.tree import TreeShape
from stagedspec.models.draft_files import load_draft, standalone_causal_lm
from .bench_log import RunFn
from .job import price_by_curve
from .bench_table import REFERENCE


def hf_generate(
    model, prompt: list[int], n: int, eos: list[int] | None = None, temperature: float = 0.0, **kw
) -> list[int]:
    """Hugging Face ``generate``: greedy at temperature 0, else sampled (no top-k/top-p)."""
    ids = torch.tensor([prompt], device=model.device)
    sample = (
        {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        if temperature > 0
        else {"do_sample": False}
    )
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=n,
        eos_token_id=eos or None,
        pad_token_id=0,
        **sample,
        **kw,
    )
    new = out[0, len(prompt) :].tolist()
    stop = next((i for i, t in enumerate(new) if eos and t in eos), None)
    return new if stop is None else new[: stop + 1]


def ours_fn(target, make, sampling, eos, plan, kv=None, keep: bool = True) -> RunFn:
    """One of our methods: a drafter from ``make``, its curve-priced routers on ``plan``'s cost
    curve where it has one (``peers.py``: the native target's its own; llama.cpp's forward has no
    calibrated curve, so a router there prices on the torch plan's shape, scaled by its measured
    seconds when timed); ``kv``: the target's cache if not its torch model's (``LlamaCppKV``).
    ``keep``: one drafter serves every run, as in the runner's jobs and a server (a router's
    statistics carry over from prompt to prompt; each run still resets the caches); False: a fresh
    drafter each run, every prompt routed from the priors."""
    kept = []

    def run(prompts, n, seed):
        if not (keep and kept):
            kept[:] = [make()]
            price_by_curve(kept[0], plan.step_curve)
        drafter = kept[0]
        res = SpeculativeDecoder(target.model, drafter, replace(sampling, seed=seed), eos, plan=plan, kv=kv).generate(
            prompts, n
        )
        s = res.summary()
        top = res.sequences[0].draft_level
        return {
            "outputs": [q.output_ids for q in res.sequences],
            "target_calls": res.target_calls,
            "target_forward_time": res.target_forward_time,
            "prefill_seconds": res.prefill_time,
            "rounds": int(s["rounds"]),
            "drafted": s.get(f"drafted/{top}", 0.0) if top else None,
            "accepted": s.get(f"accepted/{top}", 0.0) if top else None,
        }

    return run


def hf_fn(model, eos, temperature, **kw) -> RunFn:
    """HF ``generate`` with ``kw`` (e.g. ``assistant_model``, ``prompt_lookup_num_tokens``).
    An assistant's generation config is restored before every prompt: HF's heuristic
    schedule rewrites ``num_assistant_tokens`` after each call, so without the reset a
    prompt would start from the state the previous one (or a warm-up) left."""
    assistant = kw.get("assistant_model")
    start = copy.deepcopy(assistant.generation_config) if assistant is not None else None

    def run(prompts, n, seed):
        torch.manual_seed(seed)  # HF samples from torch's global generator
        outputs = []
        for p in prompts:
            if assistant is not None:
                assistant.generation_config = copy.deepcopy(start)
            outputs.append(hf_generate(model, p, n, eos=eos, temperature=temperature, **kw))
        return {"outputs": outputs}

    return run


def prompt_lookup_settings(spec: str | int) -> dict[str, dict]:
    """``--prompt-lookup``: comma-separated ``N`` or ``N:M`` (HF's ``prompt_lookup_num_tokens``
    N and ``max_matching_ngram_size`` M, HF's default 2 when left out) -> method name ->
    generate() keywords. One value keeps the name ``hf_prompt_lookup``; several are named
    ``hf_prompt_lookup_N`` / ``hf_prompt_lookup_N_M``."""
    items = [x.strip() for x in str(spec).split(",") if x.strip()]
    out: dict[str, dict] = {}
    for item in items:
        nums = item.split(":")
        if not 1 <= len(nums) <= 2 or not all(x.isdigit() and int(x) > 0 for x in nums):
            raise SystemExit(
                f"--prompt-lookup: bad item {item!r} in {spec!r}; valid: N or N:M, positive integers "
                f"(e.g. 10,10:3,20:4)"
            )
        kw = {"prompt_lookup_num_tokens": int(nums[0])}
        if len(nums) == 2:
            kw["max_matching_ngram_size"] = int(nums[1])
        name = "hf_prompt_lookup" if len(items) == 1 else "hf_prompt_lookup_" + "_".join(nums)
        out[name] = kw
    if not out:
        raise SystemExit(f"--prompt-lookup: no setting in {spec!r}; valid: N or N:M, comma-separated")
    return out


def our_methods(target, files: dict[str, Path], k: int, tree: str | None, lower_k: int) -> tuple[dict, dict]:
    """name -> factory of a fresh drafter (None: plain decoding), and name -> why skipped."""
    V = target.vocab_size
    made, skipped = {"ar": lambda: None}, {}
    # the cheapest chains: nothing but the target scores lower_k + 1 positions (T(3) ~ 1.1 T(1) here)
    made["lookup>target"] = lambda: PromptLookupDrafter(k=lower_k, name="lookup")
    if files["feature"].is_file():
        feature = load_draft(files["feature"], target.model, target.name)
        made["feature>target"] = lambda: FeatureDrafter(feature, k=k, name="feature")
        if tree:
            shape = TreeShape.parse(tree)
            made["feature-tree>target"] = lambda: FeatureDrafter(feature, tree=shape, name="feature")
    else:
        skipped["feature>target"] = skipped["feature-tree>target"] = f"no feature draft at {files['feature']}"
    if not files["layers"].is_file():
        skipped["ngram>layers>target"] = f"no layers draft at {files['layers']}"
    elif not files["ngram"].is_file():
        skipped["ngram>layers>target"] = f"no n-gram corpus at {files['ngram']}"
    else:
        layers = load_draft(files["layers"], target.model, target.name)
        base = corpus_lm(files["ngram"], files["ngram"].stat().st_mtime, V, 3)
        made["ngram>target"] = lambda: KatzNgramDrafter(V, k=lower_k, base=base, name="ngram")
        made["ngram>layers>target"] = lambda: ModelDrafter(
            layers, k=k, lower=KatzNgramDrafter(V, k=lower_k, base=base), name="layers"
        )
    skipped["ngram>feature>target"] = "FeatureDrafter takes no lower= level (it drafts only from the target's features)"
    return made, skipped


LEVEL_KINDS = ("lookup", "ngram", "small", "fr", "q4", "n4", "copy", "route", "priced", "timed", "rtimed", "recycle")
MODEL_KINDS = ("small", "fr", "q4", "n4")  # the packaged draft model: as it is / pruned head / 4-bit at few rows
# through torch / re-encoded Q4_K blocks through the native kernel at every row count (weights=requant_q4k)
ROUTER_KINDS = ("route", "priced", "timed", "rtimed")
INT4_ROWS = 2
"""``q4``: the draft's forwards of up to this many rows take 4-bit weights (``KernelChoice.int4_rows``)."""


def parse_ours(spec: str) -> dict[str, list[tuple[str, list[int]]]]:
    """``--ours`` for a packaged pair: comma-separated hierarchies, each its levels lowest
    first joined by '>', each level ``kind:k[:min_match]``: ``lookup:k`` prompt lookup,
    ``ngram:k`` the Katz n-gram over the context (``ngram:k:G``: drafting only from a
    distribution whose likeliest token has at least G percent, ``min_top``), ``small:k`` the packaged draft model,
    ``fr:k`` the same with a 32,768-token frequency-pruned head (``drafters/pruned_head.py``),
    ``q4:k`` the same model whose 1-2-row forwards take 4-bit weights (``INT4_ROWS``), ``n4:k`` the
    same model re-encoded as Q4_K blocks through the native kernel (the draft loaded with
    ``weights=requant_q4k``; ``small`` and ``q4`` then keep off the blocks),
    ``small:k:P`` / ``fr:k:P`` / ``q4:k:P`` a draft that stops after a pick it gives less than P percent
    (``stop_below`` = P / 100, k the cap), ``q4:k:P:A`` also offering its A next-best tokens beside
    the pick that stopped it (``stop_alternatives``), ``copy:k:min_match[:miss_below]`` the bypass level,
    ``route:k`` the bypass level's priced router (``RoutePrices``' defaults), ``priced:k`` the same
    pricing verifications by the target's calibrated cost curve (``pair_methods``' ``curve``), ``timed:k``
    the priced router in measured seconds with a plain step as a third proposal (on the curve's shape);
    the routers give the level below the prompt when a round first goes below (``lazy_lower``), and
    with the prompt as it comes with ``route:K:1`` / ``priced:K:1`` / ``timed:K:1``; ``rtimed:K:N`` the timed
    router offering Token Recycling trees of N nodes (``drafters/recycle.py``) where it would take a plain
    step; ``recycle:N`` those trees alone, drafting for the target;
    ``ar`` is plain decoding.
    Name -> levels."""
    out = {}
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        if item == "ar":
            out["ar"] = []
            continue
        levels = []
        for part in item.split(">"):
            kind, *nums = part.split(":")
            if (
                kind not in LEVEL_KINDS
                or not nums
                or not all(n.isdigit() and int(n) > 0 for n in nums)
                or len(nums) > (3 if kind in ("copy", *MODEL_KINDS) else 2 if kind in ("ngram", *ROUTER_KINDS) else 1)
                or (kind in ROUTER_KINDS and kind != "rtimed" and len(nums) > 1 and int(nums[1]) != 1)
                or (kind == "rtimed" and (len(nums) != 2 or int(nums[1]) > len(RANKED_PATHS)))
                or (kind == "recycle" and (int(nums[0]) > len(RANKED_PATHS) or ">" in item))
                or (kind == "ngram" and len(nums) > 1 and int(nums[1]) >= 100)
                or (kind in MODEL_KINDS and len(nums) > 1 and int(nums[1]) >= 100)
                or (kind in MODEL_KINDS and len(nums) > 2 and int(nums[2]) > 8)
            ):
                raise SystemExit(
                    f"--ours: bad level {part!r} in {item!r}; valid: ar, lookup:K, ngram:K[:MIN_TOP_PERCENT], "
                    f"small:K[:STOP_PERCENT[:ALTS]], fr:..., q4:..., n4:... (STOP_PERCENT 1-99, ALTS 1-8), copy:K[:MIN_MATCH[:MISS_BELOW]], route:K[:1], priced:K[:1], timed:K[:1], "
                    f"rtimed:K:NODES, recycle:NODES alone (NODES 1-{len(RANKED_PATHS)}), joined "
                    f"by '>' lowest first (e.g. ngram:4>small:8>copy:24:8, ngram:4>small:16:40)"
                )
            levels.append((kind, [int(n) for n in nums]))
        out[item] = levels
    return out


def pair_methods(target, small, spec: str, curve: tuple[float, ...] = ()) -> dict:
    """name -> factory of a fresh drafter for a packaged target and draft model (``parse_ours``);
    ``curve``: the target's T(n) / T(1) that ``priced:k`` routes by (``KernelChoice.step_curve``)."""
    V = target.vocab_size
    kinds = {kind for levels in parse_ours(spec).values() for kind, _ in levels}
    if {"priced", "timed", "rtimed"} & kinds and not curve:
        raise SystemExit(
            "--ours: priced:K, timed:K and rtimed:K:N need the target's calibrated cost curve (--kernels fast); use route:K"
        )
    fr_model = None
    if "fr" in kinds:
        fr_model = pruned_copy(small.model, head_subset(small, 32768))

    def factory(levels):
        def make():
            d = None
            for kind, nums in levels:
                if kind == "lookup":
                    d = PromptLookupDrafter(k=nums[0], name="lookup")
                elif kind == "ngram":
                    d = KatzNgramDrafter(V, k=nums[0], name="ngram", min_top=nums[1] / 100 if len(nums) > 1 else 0.0)
                elif kind in MODEL_KINDS:
                    d = ModelDrafter(
                        fr_model if kind == "fr" else small.model,
                        k=nums[0],
                        lower=d,
                        name="small",
                        stop_below=nums[1] / 100 if len(nums) > 1 else 0.0,
                        int4_rows=INT4_ROWS if kind == "q4" else 0,
                        stop_alternatives=nums[2] if len(nums) > 2 else 0,
                        native=kind == "n4",
                    )
                elif kind == "recycle":
                    d = RecycleDrafter(nums[0])
                elif kind in ROUTER_KINDS:
                    timed = kind in ("timed", "rtimed")
                    d = BypassDrafter(
                        d,
                        k=nums[0],
                        min_match=1,
                        name="copy",
                        prices=RoutePrices(),
                        timed=timed,
                        cost_curve=kind != "route",
                        lazy_lower=len(nums) == 1 or kind == "rtimed",
                        recycle=RecycleDrafter(nums[1]) if kind == "rtimed" else None,
                    )
                    if kind in ("priced", "timed", "rtimed"):
                        d.use_step_curve(curve)
                else:
                    d = BypassDrafter(
                        d,
                        k=nums[0],
                        min_match=nums[1] if len(nums) > 1 else 1,
                        name="copy",
                        miss_below=nums[2] if len(nums) > 2 else 0,
                    )
            return d

        return make

    return {name: factory(levels) for name, levels in parse_ours(spec).items()}


def constant_assistant_tokens(spec: str | int) -> list[int]:
    """``--assistant-tokens``: comma-separated draft lengths of HF assisted generation with a
    constant schedule (``0``: none), e.g. ``4,8,12``."""
    items = [x.strip() for x in str(spec).split(",") if x.strip()]
    if not items or not all(x.isdigit() for x in items):
        raise SystemExit(
            f"--assistant-tokens: bad value {spec!r}; valid: 0 or comma-separated positive integers (e.g. 4,8,12)"
        )
    return [int(x) for x in items if int(x) > 0]


def pair_hf_methods(args, hf_model, hf_draft, eos) -> tuple[dict, dict, dict]:
    """HF generate, assisted generation with the packaged draft (HF's schedule and a
    constant one of ``--assistant-tokens``) and prompt lookup."""
    T = args.temperature
    made = {REFERENCE: hf_fn(hf_model, eos, T)}
    skipped, info = {}, {}
    gc = hf_draft.generation_config
    gc.num_assistant_tokens_schedule = args.assistant_schedule
    info["assistant"] = gc
    candidates = {"hf_assisted": hf_fn(hf_model, eos, T, assistant_model=hf_draft)}
    for n in constant_assistant_tokens(args.assistant_tokens):
        const = copy.copy(hf_draft)  # the same weights, its own generation config
        const.generation_config = copy.deepcopy(gc)
        const.generation_config.num_assistant_tokens_schedule = "constant"
        const.generation_config.num_assistant_tokens = n
        const.generation_config.assistant_confidence_threshold = 0.0
        candidates[f"hf_assisted_const{n}"] = hf_fn(hf_model, eos, T, assistant_model=const)
    for name, kw in prompt_lookup_settings(args.prompt_lookup).items():
        candidates[name] = hf_fn(hf_model, eos, T, **kw)
    for name, fn in candidates.items():
        try:
            fn([[1, 2, 3, 4]], 4, 0)
            made[name] = fn
        except Exception as e:
            skipped[name] = f"transformers refused: {type(e).__name__}: {e}"
    return made, skipped, info


def hf_methods(args, hf_model, target_name: str, files: dict[str, Path], eos) -> tuple[dict, dict, dict]:
    """name -> RunFn of the HF methods that work here, name -> why skipped, and the
    assistant's settings as used."""
    T = args.temperature
    made = {REFERENCE: hf_fn(hf_model, eos, T)}
    skipped, info = {}, {}
    candidates = {}
    if not files["layers"].is_file():
        skipped["hf_assisted_layers"] = f"no layers draft at {files['layers']}"
    else:
        # the draft around the untouched HF model, so HF's path never runs our kernels
        assistant = standalone_causal_lm(load_draft(files["layers"], hf_model, target_name), hf_model)
        gc = assistant.generation_config
        gc.num_assistant_tokens_schedule = args.assistant_schedule
        candidates["hf_assisted_layers"] = hf_fn(hf_model, eos, T, assistant_model=assistant)
        info["assistant"] = gc
    for name, kw in prompt_lookup_settings(args.prompt_lookup).items():
        candidates[name] = hf_fn(hf_model, eos, T, **kw)
    candidates["hf_early_exit"] = hf_fn(hf_model, eos, T, assistant_early_exit=args.early_exit)
    for name, fn in candidates.items():
        try:
            fn([[1, 2, 3, 4]], 4, 0)  # transformers refuses at the first call, if at all
            made[name] = fn
        except Exception as e:
            skipped[name] = f"transformers refused: {type(e).__name__}: {e}"
    return made, skipped, info


def assistant_settings(generation_config) -> dict:
    """Schedule, number of assistant tokens and confidence threshold as HF uses them:
    the assistant's generation config, unset fields from HF's global defaults."""
    defaults = (
        generation_config._get_default_generation_params()
        if hasattr(generation_config, "_get_default_generation_params")
        else {}
    )
    out = {}
    for k in ("num_assistant_tokens_schedule", "num_assistant_tokens", "assistant_confidence_threshold"):
        v = getattr(generation_config, k, None)
        out[k] = v if v is not None else defaults.get(k)
    return out
