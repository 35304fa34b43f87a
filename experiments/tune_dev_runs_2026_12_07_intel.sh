#!/usr/bin/env bash
# Copies priced per token by the match it continues (timed:24) or all by the match they follow
# (priced:24 here, before 2026-12-07), interleaved, both with the lazy prefill and copy_weight 0.5;
# HumanEval dev 0-7 at T = 0, MT-bench dev 20-23 first turns at T = 0, HumanEval dev 0-7 at T = 0.7
# with 2 seeds; 96 tokens, the target on its GGUF's blocks; a 2-core Intel Xeon, nothing else running.
# Tables: docs/tuning/intel-dev-runs-*.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
S="ngram:1:30>n4:12:50:2"
C=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev --max-new-tokens 96
   --batch-sizes 1 --no-figure --tracking-uri none --weights gguf_native --hf-methods none)
run=experiments/tune_dev_runs_2026_12_07_intel.py
python $run "${C[@]}" --repeats 1 --prompts 8 --first-prompt 0 --data humaneval --temperature 0 \
  --ours "ar,copy:16:3,$S>timed:24,$S>priced:24" --out docs/tuning/intel-dev-runs-humaneval-t0 || exit 1
date -u
python $run "${C[@]}" --repeats 2 --prompts 8 --first-prompt 0 --data humaneval --temperature 0.7 \
  --ours "ar,copy:16:3,$S>timed:24,$S>priced:24" --out docs/tuning/intel-dev-runs-humaneval-t07
date -u
python $run "${C[@]}" --repeats 1 --prompts 4 --first-prompt 20 --data mt_bench --temperature 0 \
  --ours "ar,copy:16:3,$S>timed:24,$S>priced:24" --out docs/tuning/intel-dev-runs-mtbench-t0
date -u
