#!/usr/bin/env bash
# The timed router's copies' prior worth 2 rounds (priced:24 here, as before 2026-12-07) and 0.5 (timed:24),
# interleaved, both with lazy_lower; then the 0.5B's prefill lazy (timed:24) or with the prompt (timed:24:1), the
# copies' prior worth 2 rounds as before (copy_weight is fixed in RoutePrices: this part ran before it became
# 0.5). 4 dev problems per set (HumanEval 20-23
# at T = 0 and 0.7, MT-bench 20-23 first turns at T = 0), 96 tokens, the target on its GGUF's blocks; a 2-core AMD
# EPYC, nothing else running. Tables: docs/tuning/amd-dev-router-*.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
S="ngram:1:30>n4:12:50:2"
C=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev --prompts 4 --first-prompt 20
   --max-new-tokens 96 --repeats 1 --batch-sizes 1 --no-figure --tracking-uri none --weights gguf_native --hf-methods none)
run=experiments/tune_dev_router_2026_12_07_amd.py
python $run "${C[@]}" --data humaneval --temperature 0 --ours "ar,copy:16:3,$S>timed:24,$S>priced:24" \
  --out docs/tuning/amd-dev-router-humaneval-t0 || exit 1
date -u
python $run "${C[@]}" --data humaneval --temperature 0.7 --ours "ar,copy:16:3,n4:12:50:2,$S>timed:24,$S>priced:24" \
  --out docs/tuning/amd-dev-router-humaneval-t07
date -u
python $run "${C[@]}" --data mt_bench --temperature 0 --ours "ar,copy:16:3,n4:12:50:2,$S>timed:24,$S>priced:24" \
  --out docs/tuning/amd-dev-router-mtbench-t0
date -u
python experiments/peers.py "${C[@]}" --first-prompt 0 --data humaneval --temperature 0 \
  --ours "ar,copy:16:3,$S>timed:24,$S>timed:24:1" --out docs/tuning/amd-dev-lazy-humaneval-t0
date -u
