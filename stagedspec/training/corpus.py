"""The distillation corpus: the target's own answers to the templated training prompts
(``stagedspec/prompts/training_prompts.py``, never a benchmark's), generated in batches
through the engine, greedy and sampled, and resumed batch by batch (``build_corpus``); the
target's last hidden states over them (``target_features``); and the vocabulary subset of
its most frequent tokens (``vocab_subset``, FR-Spec); the train / held-out split and the
cached features distillation reads (``corpus_splits``). Used by ``distillation.py``."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kernels import HF_KERNELS
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.models.chat_text import encode, eos_token_ids, ids_to_text
from stagedspec.models.model_loading import LoadedModel
from stagedspec.prompts.training_prompts import prompt_list_key, training_prompts


def generate_corpus(
    model: torch.nn.Module,
    prompts: list[list[int]],
    temperature: float,
    max_new_tokens: int,
    batch_size: int,
    seed: int,
    eos_ids: list[int],
    plan=None,
    desc: str = "generate",
) -> list[list[int]]:
    """The target's answer (token ids, EOS included when it stopped) to each prompt, by
    plain decoding through the engine in batches of prompts of similar length (the
    engine's cache appends in place; Hugging Face's ``DynamicCache`` copies the whole
    cache every step, which dominates at batch 24 and 300+ tokens)."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[list[int] | None] = [None] * len(prompts)
    for start in tqdm(range(0, len(order), batch_size), desc=desc, unit="batch", leave=False):
        idx = order[start : start + batch_size]
        sampling = SamplingConfig(temperature=temperature, seed=seed + start)
        dec = SpeculativeDecoder(model, None, sampling, eos_token_ids=eos_ids, plan=plan or HF_KERNELS)
        res = dec.generate([prompts[i] for i in idx], max_new_tokens)
        for i, seq in zip(idx, res.sequences):
            out[i] = seq.output_ids
    return [o for o in out]  # type: ignore[misc]


@dataclass
class CorpusSpec:
    """What ``build_corpus`` generates: ``prompts`` training prompts (``training_prompts``
    with ``seed``), each answered at every temperature in ``temperatures``."""

    prompts: int = 400
    temperatures: tuple[float, ...] = (0.0, 0.7)
    max_new_tokens: int = 256
    batch_size: int = 48
    seed: int = 0
    turns: int = 1
    """Turns answered per prompt (a quarter of the training prompts have a follow-up turn)."""

    def validate(self) -> None:
        if not isinstance(self.prompts, int) or self.prompts < 1:
            raise ValueError(f"corpus prompts must be an integer >= 1, got {self.prompts!r}")
        if not self.temperatures or any(not isinstance(t, (int, float)) or t < 0 for t in self.temperatures):
            raise ValueError(f"corpus temperatures must be a non-empty list of numbers >= 0, got {self.temperatures!r}")
        for k in ("max_new_tokens", "batch_size", "turns"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"corpus {k} must be an integer >= 1, got {v!r}")


def corpus_dir(cache_dir: str | Path, target_name: str, spec: CorpusSpec, kernels: str = "hf") -> Path:
    """Where a target's corpus for ``spec`` lives: one directory per (target, spec, kernel
    plan, prompt lists), so every run of the same recipe reuses (or resumes) the same
    generation, and a change of what generates it starts a new one."""
    what = {**asdict(spec), "kernels": kernels, "prompts_key": prompt_list_key()}
    key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]
    return Path(cache_dir) / "distill" / f"{target_name}-{key}"


def _answered(path: Path) -> dict[tuple[int, int, float], dict]:
    """The records already in ``path``, by (prompt, turn, temperature): what a resumed run
    need not answer again."""
    done: dict[tuple[int, int, float], dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a kill mid-write: redo it
                continue
            done[(rec["prompt"], rec["turn"], rec["temperature"])] = rec
    return done


def _conversation_ids(
    target: LoadedModel, turns: list[str], i: int, turn: int, temp: float, done: dict[tuple[int, int, float], dict]
) -> list[int]:
    """Prompt ``i``'s turn ``turn`` as the target reads it, with the target's own earlier
    answers (at ``temp``) as the history."""
    history = [(turns[t], ids_to_text(target, done[(i, t, temp)]["answer"])) for t in range(turn)]
    return encode(target, turns[turn], history)


def build_corpus(target: LoadedModel, spec: CorpusSpec, path: str | Path, plan=None) -> list[dict]:
    """The target's answers to the training prompts, one JSON record per conversation in
    ``path`` (``ids``: the whole conversation as the target reads it, ``start``: index of
    the last answer's first token, ``temperature``, ``prompt``). Records are appended a
    batch at a time, so an interrupted run resumes where it stopped. Second turns are
    answered after every first turn, with the target's own first answer as history."""
    spec.validate()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = _answered(path)
    prompts = training_prompts(spec.prompts, seed=spec.seed)
    eos = eos_token_ids(target)
    with path.open("a", encoding="utf-8") as f:
        for turn in range(min(spec.turns, max(len(p) for p in prompts))):
            for temp in spec.temperatures:
                # batches are fixed by the spec, so a resumed run makes the same batches (and
                # draws the same samples) as one that was never interrupted
                rows = [i for i, p in enumerate(prompts) if len(p) > turn]
                for start in tqdm(
                    range(0, len(rows), spec.batch_size), desc=f"turn {turn + 1} T={temp}", unit="batch", leave=False
                ):
                    idx = rows[start : start + spec.batch_size]
                    if all((i, turn, temp) in done for i in idx):
                        continue
                    ids = [_conversation_ids(target, prompts[i], i, turn, temp, done) for i in idx]
                    answers = generate_corpus(
                        target.model,
                        ids,
                        temp,
                        spec.max_new_tokens,
                        len(idx),
                        spec.seed + 7919 * turn + start,
                        eos,
                        plan=plan,
                        desc="batch",
                    )
                    for i, prompt_ids, answer in zip(idx, ids, answers):
                        rec = {
                            "prompt": i,
                            "turn": turn,
                            "temperature": temp,
                            "ids": prompt_ids + answer,
                            "start": len(prompt_ids),
                            "answer": answer,
                        }
                        done[(i, turn, temp)] = rec
                        f.write(json.dumps(rec) + "\n")
                    f.flush()
    return [done[k] for k in sorted(done)]


@torch.no_grad()
def target_features(
    model: torch.nn.Module, sequences: list[list[int]], batch_tokens: int = 4096, desc: str = "features"
) -> list[torch.Tensor]:
    """The target's last hidden state (after its final norm) at every position of every
    sequence, float16 on the CPU: ``[len(seq), hidden]`` each."""
    decoder = model.get_decoder()
    dev = next(model.parameters()).device
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    out: list[torch.Tensor | None] = [None] * len(sequences)
    batches, cur = [], []
    for i in order:
        if cur and (len(cur) + 1) * len(sequences[i]) > batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    for idx in tqdm(batches, desc=desc, unit="batch", leave=False):
        width = max(len(sequences[i]) for i in idx)
        ids = torch.zeros(len(idx), width, dtype=torch.long)
        mask = torch.zeros(len(idx), width, dtype=torch.long)
        for r, i in enumerate(idx):  # right padding: causal attention never sees it
            ids[r, : len(sequences[i])] = torch.tensor(sequences[i])
            mask[r, : len(sequences[i])] = 1
        h = decoder(input_ids=ids.to(dev), attention_mask=mask.to(dev)).last_hidden_state
        for r, i in enumerate(idx):
            out[i] = h[r, : len(sequences[i])].to("cpu", torch.float16)
    return out  # type: ignore[return-value]


def vocab_subset(sequences: list[list[int]], size: int, vocab_size: int, always: list[int] = ()) -> torch.Tensor:
    """The ``size`` most frequent ids in ``sequences`` (ties by id), ``always`` included,
    padded with the lowest unused ids if the corpus has fewer distinct tokens."""
    if not isinstance(size, int) or not 1 <= size <= vocab_size:
        raise ValueError(f"vocabulary subset size must be in 1..{vocab_size} (the target's vocabulary), got {size!r}")
    counts = Counter(t for s in sequences for t in s)
    keep = list(dict.fromkeys([int(t) for t in always if 0 <= int(t) < vocab_size]))
    for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(keep) >= size:
            break
        if t not in keep:
            keep.append(t)
    filler = (t for t in range(vocab_size) if t not in set(keep))
    while len(keep) < size:
        keep.append(next(filler))
    return torch.tensor(sorted(keep[:size]), dtype=torch.long)


def coverage(sequences: list[list[int]], subset: torch.Tensor) -> float:
    """Share of token occurrences in ``sequences`` that the subset covers."""
    s = set(subset.tolist())
    total = sum(len(x) for x in sequences)
    return sum(t in s for x in sequences for t in x) / total if total else 0.0


def split_records(records: list[dict], heldout: float) -> tuple[list[dict], list[dict]]:
    """Train / held-out by prompt (every answer to a held-out prompt is held out)."""
    prompts = sorted({r["prompt"] for r in records})
    n_out = max(1, int(round(len(prompts) * heldout)))
    out = set(prompts[-n_out:])
    return [r for r in records if r["prompt"] not in out], [r for r in records if r["prompt"] in out]


def cached_features(target: torch.nn.Module, records: list[dict], path: Path) -> list[torch.Tensor]:
    """``target_features`` of every record, cached in ``path`` (keyed by record)."""
    from safetensors.torch import load_file, save_file

    keys = [f"{r['prompt']}/{r['turn']}/{r['temperature']}" for r in records]
    have = load_file(str(path)) if path.is_file() else {}
    missing = [i for i, k in enumerate(keys) if k not in have or have[k].shape[0] != len(records[i]["ids"])]
    if missing:
        feats = target_features(target, [records[i]["ids"] for i in missing])
        have.update({keys[i]: f.contiguous() for i, f in zip(missing, feats)})
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        save_file(have, str(tmp))
        os.replace(tmp, path)
    return [have[k] for k in keys]


def corpus_splits(
    target: LoadedModel,
    spec: CorpusSpec,
    heldout: float,
    work: Path,
    plan,
    on_metrics: Callable[[dict[str, float], int | None], None],
) -> tuple[list[dict], list[dict], list[torch.Tensor], list[torch.Tensor]]:
    """The target's answers (``build_corpus``, cached in ``work``) split into training and
    held-out records (``split_records``, a ``heldout`` share of the prompts), their sizes
    reported to ``on_metrics``, and each split's target features (``cached_features``)."""
    records = build_corpus(target, spec, work / "corpus.jsonl", plan=plan)
    train, held = split_records(records, heldout)
    on_metrics(
        {
            "corpus_records": len(records),
            "corpus_answer_tokens": sum(len(r["answer"]) for r in train),
            "heldout_records": len(held),
        },
        None,
    )
    features = cached_features(target.model, train + held, work / "features.safetensors")
    return train, held, features[: len(train)], features[len(train) :]
