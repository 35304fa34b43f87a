#!/usr/bin/env bash
# coupling=gumbel against the default residual rule on the dev split at T = 0.7 (docs/tuning/README.md, "Sampled
# benchmarks on one text"): under gumbel every method emits the same tokens per seed, so the per-prompt ratios are
# paired; the 0.5B alone also runs under residual, to see what the weaker coupling costs a sampled draft. 96
# tokens, the target on its GGUF's blocks; a 2-core AMD EPYC (Zen 4), nothing else running.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
C=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev --max-new-tokens 96
   --batch-sizes 1 --no-figure --tracking-uri none --weights gguf_native --hf-methods none --data humaneval
   --temperature 0.7 --prompts 6 --first-prompt 14 --repeats 2)
staged="ngram:1:30>n4:12:50:2>timed:24"
python experiments/peers.py "${C[@]}" --coupling gumbel --ours "ar,copy:16:3,timed:24,n4:12:50:2,$staged" \
  --out docs/tuning/amd-coupling-gumbel-humaneval-t07 || exit 1
date -u
python experiments/peers.py "${C[@]}" --coupling residual --ours "ar,n4:12:50:2,n4:6:50:2" \
  --out docs/tuning/amd-coupling-residual-humaneval-t07
date -u
python experiments/peers.py "${C[@]}" --coupling gumbel --ours "ar,n4:12:50:2,n4:6:50:2" \
  --out docs/tuning/amd-coupling-gumbel-small-humaneval-t07
date -u
