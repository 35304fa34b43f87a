"""Decode one prompt with a configured hierarchy and print the text and the round stats.

    python -m stagedspec.generate prompt="Why is the sky blue?"
    python -m stagedspec.generate prompt="..." levels.small=null levels.ngram.k=6 sampling=t07
    python -m stagedspec.generate prompt="..." tree=specinfer_221 levels.ngram=null

Uses the same config groups as the sweep runner (conf/), without tracking or data.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from ..decoding import SpeculativeDecoder
from ..hierarchy import build_hierarchy
from ..models import load_cached
from ..text import encode, eos_token_ids, ids_to_text
from .cli import config_errors
from .plan import CONF_DIR, ConfigError, validate_cfg


def generate_one(cfg: DictConfig) -> dict:
    prompt = cfg.get("prompt") if "prompt" in cfg and not OmegaConf.is_missing(cfg, "prompt") else None
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError(f'prompt must be non-empty text, e.g. prompt="Hello", got {prompt!r}')
    plan = validate_cfg(cfg, with_data=False, extra_keys=("prompt",))  # before any model is loaded
    target = load_cached(plan.target)
    drafter = build_hierarchy(plan.levels, target, load_cached)
    dec = SpeculativeDecoder(target.model, drafter, plan.sampling, eos_token_ids(target),
                             context_length=target.context_length)
    ids = encode(target, prompt, [])
    res = dec.generate([ids], plan.max_new_tokens)
    seq = res.sequences[0]
    return {"method": plan.method, "text": ids_to_text(target, seq.output_ids), "result": res}


# Absolute, for the reason given in app/run.py.
@hydra.main(config_path=str(CONF_DIR), config_name="generate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with config_errors():  # one line on the console; HYDRA_FULL_ERROR=1 for the traceback
        out = generate_one(cfg)
    res = out["result"]
    seq = res.sequences[0]
    print(out["text"])
    print(f"\n--- {out['method']}: {len(seq.output_ids)} tokens in {len(seq.rounds)} target calls")
    print(f"{'round':>5s} {'drafted':>24s} {'accepted':>24s} {'emitted':>7s} {'time ms':>8s}")
    for i, (r, t) in enumerate(zip(seq.rounds, res.phase_times)):
        print(f"{i:5d} {str(r.drafted):>24s} {str(r.accepted):>24s} {r.emitted:7d} {1000 * t.total:8.1f}")
    s = res.summary()
    keys = ["mean_accepted_tokens_per_call", "acceptance_rate", "wasted_target_fraction", "tokens_per_s",
            "share_outside_forwards"]
    print("  ".join(f"{k}={s[k]:.3f}" for k in keys if k in s))
