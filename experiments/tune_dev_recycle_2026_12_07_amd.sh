#!/usr/bin/env bash
# Token Recycling on the dev split (docs/tuning/amd-recycle-*): recycled trees alone (`recycle:N`, N nodes) and
# offered by the timed router where it would take a plain step (`rtimed:24:N`), beside the staged default
# (`timed:24`), plain decoding and prompt lookup, interleaved in one run. 96 tokens, the target on its GGUF's
# blocks, one drafter per method through each run (the table and the router's statistics carry over from prompt
# to prompt); a 2-core AMD EPYC, nothing else running.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
S="ngram:1:30>n4:12:50:2"
C=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev --max-new-tokens 96
   --batch-sizes 1 --no-figure --tracking-uri none --weights gguf_native --hf-methods none --repeats 1)
ours="ar,copy:16:3,recycle:3,recycle:6,recycle:10,$S>timed:24,$S>rtimed:24:3,$S>rtimed:24:6"
python experiments/peers.py "${C[@]}" --prompts 6 --first-prompt 26 --data mt_bench --temperature 0 \
  --ours "$ours" --out docs/tuning/amd-recycle-mtbench-t0 || exit 1
date -u
python experiments/peers.py "${C[@]}" --prompts 6 --first-prompt 8 --data humaneval --temperature 0 \
  --ours "$ours" --out docs/tuning/amd-recycle-humaneval-t0
date -u
