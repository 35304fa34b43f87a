"""Decode one prompt with a configured hierarchy and with plain decoding; print the text,
the comparison and one row per target call.

    python -m stagedspec.generate prompt="Why is the sky blue?"
    python -m stagedspec.generate prompt="..." levels.small=null levels.ngram.k=6 sampling=t07
    python -m stagedspec.generate prompt="..." tree=specinfer_221 levels.ngram=null
    python -m stagedspec.generate prompt="..." view=rounds    # also one line per round

The answer streams as rounds commit, each token coloured by the level that proposed it
(``view.py``; ``view=false``: printed at the end; plain text off a terminal or with
``NO_COLOR``).

Uses the same config groups as the sweep runner (conf/), without tracking or data. Both
decoders share the job's kernel plan (``kernels``) and get one short untimed warm-up, as
in a sweep job, so the speedup printed is the one a job would measure on this prompt.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from stagedspec.evaluation.job import assemble_job
from stagedspec.metrics.round_stats import GenerationResult
from stagedspec.models.chat_text import encode, ids_to_text
from .cli import entry_errors
from .plan import CONF_DIR, ConfigError, validate_cfg
from .view import StreamView

EXTRA_KEYS = ("prompt", "view")
"""generate's own keys (conf/generate.yaml)."""
VIEWS = (True, False, "rounds")


def generate_one(cfg: DictConfig, view: StreamView | None = None) -> dict:
    """The method's and plain decoding's results on ``cfg.prompt``:
    ``{"method", "levels", "text", "result", "plain_text", "plain_result"}`` (``plain_*``
    None when the method is plain decoding or ``baseline=false``). ``view``: streams the
    method's answer as its rounds commit (not the warm-up's, not plain decoding's)."""
    prompt = cfg.get("prompt") if "prompt" in cfg and not OmegaConf.is_missing(cfg, "prompt") else None
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError(f'prompt must be non-empty text, e.g. prompt="Hello", got {prompt!r}')
    plan = validate_cfg(cfg, with_data=False, extra_keys=EXTRA_KEYS)  # before any model is loaded
    job = assemble_job(plan, warmup_text=prompt)  # tree=auto resolved and both decoders warmed up here
    target, dec, ar = job.target, job.method, job.baseline
    ids = encode(target, prompt, [])
    if view is not None:
        view.start([lv.name for lv in plan.levels], lambda xs: ids_to_text(target, xs))
    res = dec.generate([ids], plan.max_new_tokens, on_round=view)
    if view is not None:
        view.finish()
    plain = ar.generate([ids], plan.max_new_tokens) if ar is not None else None
    return {
        "method": plan.method,
        "levels": [lv.name for lv in plan.levels],
        "text": ids_to_text(target, res.sequences[0].output_ids),
        "result": res,
        "plain_text": ids_to_text(target, plain.sequences[0].output_ids) if plain is not None else None,
        "plain_result": plain,
        "greedy": plan.sampling.greedy,
    }


def round_table(levels: list[str], res: GenerationResult) -> list[str]:
    """One line per target call: drafted/accepted per level (lowest first), tokens
    emitted, wall time."""
    seq = res.sequences[0]
    head = f"{'call':>4s} " + " ".join(f"{lv + ' d/a':>12s}" for lv in levels) + f" {'emitted':>7s} {'ms':>7s}"
    lines = [head]
    for i, (r, t) in enumerate(zip(seq.rounds, res.phase_times)):
        cells = " ".join(f"{f'{r.drafted.get(lv, 0)}/{r.accepted.get(lv, 0)}':>12s}" for lv in levels)
        lines.append(f"{i + 1:4d} {cells} {r.emitted:7d} {1000 * t.total:7.1f}")
    return lines


def report(out: dict, streamed: bool = False) -> str:
    """The answer (unless ``streamed`` already showed it), the comparison with plain
    decoding, the round table and the headline metrics."""
    res, plain = out["result"], out["plain_result"]
    seq = res.sequences[0]
    s = res.summary()
    lines = ([] if streamed else [out["text"], ""]) + [
        f"--- {out['method']}: {len(seq.output_ids)} tokens in {len(seq.rounds)} target calls, "
        f"{s['tokens_per_s']:.1f} tokens/s"
    ]
    if plain is not None:
        p = plain.summary()
        pseq = plain.sequences[0]
        speedup = s["tokens_per_s"] / p["tokens_per_s"] if p["tokens_per_s"] > 0 else float("nan")
        same = pseq.output_ids == seq.output_ids
        verdict = (
            ("identical (greedy: must be)" if same else "DIFFERENT (a bug: greedy must match)")
            if out["greedy"]
            else ("identical" if same else "different (sampling: expected; the distribution is the same)")
        )
        lines.append(
            f"--- plain decoding: {len(pseq.output_ids)} tokens in {len(pseq.rounds)} target calls, "
            f"{p['tokens_per_s']:.1f} tokens/s; speedup {speedup:.2f}x; outputs {verdict}"
        )
    lines += [""] + round_table(out["levels"], res)
    keys = ["mean_accepted_tokens_per_call", "acceptance_rate", "wasted_target_fraction", "share_outside_forwards"]
    lines.append("  ".join(f"{k}={s[k]:.3f}" for k in keys if k in s))
    return "\n".join(lines)


# Absolute, for the reason given in app/run_entry.py.
@hydra.main(config_path=str(CONF_DIR), config_name="generate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with entry_errors():  # one line on the console (a file holds any other error's traceback);
        # HYDRA_FULL_ERROR=1 prints the traceback
        mode = cfg.get("view", True)
        if mode not in VIEWS:
            raise ConfigError(f"view must be true, false or rounds, got {mode!r}")
        view = StreamView(rounds=mode == "rounds") if mode else None
        out = generate_one(cfg, view)
    print(("\n" if view else "") + report(out, streamed=view is not None))
