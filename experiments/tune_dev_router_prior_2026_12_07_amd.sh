#!/usr/bin/env bash
# The level below's prior: the default (4 accepted in 5 forwards, timed:24) against 8 accepted (priced:24 here,
# RoutePrices(prior_accepted=8)), interleaved, on the same dev problems as tune_dev_router_2026_12_07_amd.sh
# (HumanEval 20-23 at T = 0.7 and 0, MT-bench 20-23 first turns at T = 0), 96 tokens, the target on its GGUF's
# blocks, the 0.5B alone beside; a 2-core AMD EPYC, nothing else running. Tables: docs/tuning/amd-dev-prior-*.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
S="ngram:1:30>n4:12:50:2"
C=(--variant-prices '{"prior_accepted": 8}' --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16
   --split dev --prompts 4 --first-prompt 20 --max-new-tokens 96 --repeats 1 --batch-sizes 1 --no-figure
   --tracking-uri none --weights gguf_native --hf-methods none)
run=experiments/tune_dev_router_2026_12_07_amd.py
python $run "${C[@]}" --data humaneval --temperature 0.7 --ours "ar,copy:16:3,n4:12:50:2,$S>timed:24,$S>priced:24" \
  --out docs/tuning/amd-dev-prior-humaneval-t07 || exit 1
date -u
python $run "${C[@]}" --data mt_bench --temperature 0 --ours "ar,copy:16:3,n4:12:50:2,$S>timed:24,$S>priced:24" \
  --out docs/tuning/amd-dev-prior-mtbench-t0
date -u
python $run "${C[@]}" --data humaneval --temperature 0 --ours "ar,copy:16:3,$S>timed:24,$S>priced:24" \
  --out docs/tuning/amd-dev-prior-humaneval-t0
date -u
