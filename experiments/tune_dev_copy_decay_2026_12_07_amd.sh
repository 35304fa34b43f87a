#!/usr/bin/env bash
# The timed router's copy_decay on the dev split (docs/tuning/amd-copy-decay-*): in each run `timed:24` is the
# default (no decay), `priced:24` the same router with copy_decay 0.97, `route:24` with 0.9. 96 tokens, the target
# on its GGUF's blocks, one drafter per method through each run; a 2-core AMD EPYC (Zen 4), nothing else running.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
S="ngram:1:30>n4:12:50:2"
C=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev --max-new-tokens 96
   --batch-sizes 1 --no-figure --tracking-uri none --weights gguf_native --hf-methods none)
run=experiments/tune_dev_copy_decay_2026_12_07_amd.py
three="ar,copy:16:3,$S>timed:24,$S>priced:24,$S>route:24"
python $run "${C[@]}" --repeats 1 --prompts 6 --first-prompt 8 --data humaneval --temperature 0 \
  --ours "$three" --out docs/tuning/amd-copy-decay-humaneval-t0 || exit 1
date -u
python $run "${C[@]}" --repeats 2 --prompts 6 --first-prompt 14 --data humaneval --temperature 0.7 \
  --ours "$three" --out docs/tuning/amd-copy-decay-humaneval-t07
date -u
