#!/usr/bin/env bash
# The timed router's first_look on the dev split (docs/tuning/intel-first-look-*): in each run `timed:24` is the
# router's default (first_look 0 when these ran, except intel-first-look-far-humaneval-t0, run after the default
# became 6), `priced:24` and `route:24` the same router with first_look A and B (--looks A,B). 96 tokens, the
# target on its GGUF's blocks; a 2-core Intel Xeon, nothing else running, 14:17-14:47 UTC 2026-12-07 (a slow
# hour: plain decoding 13.4-15.4 tok/s). The first run made a fresh drafter per prompt (--fresh-drafters); the
# rest kept one drafter per method through the run (peers.py's default since).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
S="ngram:1:30>n4:12:50:2"
C=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev --max-new-tokens 96
   --batch-sizes 1 --no-figure --tracking-uri none --weights gguf_native --hf-methods none)
run=experiments/tune_dev_first_look_2026_12_07_intel.py
three="ar,copy:16:3,$S>timed:24,$S>priced:24,$S>route:24"
python $run --looks 3,6 "${C[@]}" --fresh-drafters --repeats 1 --prompts 8 --first-prompt 0 --data humaneval \
  --temperature 0 --ours "$three" --out docs/tuning/intel-first-look-fresh-humaneval-t0 || exit 1
python $run --looks 3,6 "${C[@]}" --repeats 1 --prompts 8 --first-prompt 0 --data humaneval --temperature 0 \
  --ours "$three" --out docs/tuning/intel-first-look-humaneval-t0
python $run --looks 3,6 "${C[@]}" --repeats 2 --prompts 8 --first-prompt 0 --data humaneval --temperature 0.7 \
  --ours "$three" --out docs/tuning/intel-first-look-humaneval-t07
python $run --looks 3,6 "${C[@]}" --repeats 1 --prompts 4 --first-prompt 20 --data mt_bench --temperature 0 \
  --ours "$three" --out docs/tuning/intel-first-look-mtbench-t0
python $run --looks 12,1000 "${C[@]}" --repeats 1 --prompts 8 --first-prompt 0 --data humaneval --temperature 0 \
  --ours "$three" --out docs/tuning/intel-first-look-far-humaneval-t0
python $run --looks 0,1000 "${C[@]}" --repeats 1 --prompts 16 --first-prompt 8 --data humaneval --temperature 0 \
  --ours "ar,copy:16:3,$S>timed:24,$S>priced:24" --out docs/tuning/intel-first-look-humaneval-t0-dev8
date -u
