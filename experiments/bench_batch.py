"""Benchmark: how the speculative gain changes with batch size, on the embedded model.

    python experiments/bench_batch.py --prompts 16 --batch-sizes 1,2,4,8,16

The same prompts are decoded by the AR baseline and by a speculative hierarchy at each
batch size (batched prefill, ragged acceptance, finished rows dropped). Reports AR and
speculative tokens/s, the speedup ratio, accepted tokens per target call and the share
of target positions spent on padding, so the shrinking gain shows as a curve.
"""

from __future__ import annotations

import argparse
import json

from stagedspec.drafters import KatzNgramDrafter, PromptLookupDrafter
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.evaluation.bench_setup import add_common_args, setup
from stagedspec.metrics.round_stats import summarize


def run(dec: SpeculativeDecoder, prompts: list[list[int]], bs: int, n: int):
    """Batches of similar prompt lengths (as a server would form them: a batch pads every
    prompt to its longest one). Returns end-to-end and decode-only (prefill excluded)
    tokens/s, the summary, and outputs in the original prompt order."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    results = [dec.generate([prompts[j] for j in order[i : i + bs]], n) for i in range(0, len(prompts), bs)]
    seqs = [s for r in results for s in r.sequences]
    tokens = sum(len(s.output_ids) for s in seqs)
    wall = sum(r.wall_time for r in results)
    prefill = sum(r.prefill_time for r in results)
    outputs = [None] * len(prompts)
    for j, s in zip(order, seqs):
        outputs[j] = s.output_ids
    return tokens / wall, tokens / (wall - prefill), summarize(seqs), outputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", default="1,2,4,8,16")
    ap.add_argument("--method", default="lookup", choices=["lookup", "ngram"])
    ap.add_argument("--k", type=int, default=4)
    add_common_args(ap)
    args = ap.parse_args()
    target, prompts, _ = setup(args)
    n = args.max_new_tokens
    drafter = (
        PromptLookupDrafter(k=args.k) if args.method == "lookup" else KatzNgramDrafter(target.vocab_size, k=args.k)
    )
    ar = SpeculativeDecoder(target.model, None, SamplingConfig())
    spec = SpeculativeDecoder(target.model, drafter, SamplingConfig())
    ar.generate(prompts[:2], 4), spec.generate(prompts[:2], 4)  # warm-up
    rows, ref = [], None
    for bs in [int(b) for b in args.batch_sizes.split(",")]:
        ar_tps, ar_dec, _, ar_out = run(ar, prompts, bs, n)
        sp_tps, sp_dec, s, sp_out = run(spec, prompts, bs, n)
        ref = ref or ar_out
        rows.append(
            {
                "batch_size": bs,
                "ar_tokens_per_s": ar_tps,
                "spec_tokens_per_s": sp_tps,
                "speedup": sp_tps / ar_tps,
                "ar_decode_tokens_per_s": ar_dec,
                "spec_decode_tokens_per_s": sp_dec,
                "decode_speedup": sp_dec / ar_dec,
                "tokens_per_call": s["mean_accepted_tokens_per_call"],
                "padding_fraction": s["padding_fraction"],
                "identical": ar_out == ref and sp_out == ref,
            }
        )
        r = rows[-1]
        print(
            f"bs={bs:3d} AR {ar_tps:6.2f} spec {sp_tps:6.2f} tok/s (x{r['speedup']:.2f}) | decode only: "
            f"AR {ar_dec:6.2f} spec {sp_dec:6.2f} tok/s (x{r['decode_speedup']:.2f}) | "
            f"tok/call {r['tokens_per_call']:.2f}  verify padding {r['padding_fraction']:.1%}  "
            f"exact {r['identical']}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
