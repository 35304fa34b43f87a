#!/usr/bin/env bash
# The rest of the dev-split tuning of 2026-12-06 (after tune_dev_2026_12_06.sh's T = 0 run, cut to fit
# the session): T = 0.7 on 4 of the same HumanEval dev problems and MT-bench dev first turns (4),
# the staged default at k 12 and 8 (T = 0's best) beside its ablations at their T = 0 best. Tables under docs/tuning/.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev
        --max-new-tokens 64 --repeats 1 --batch-sizes 1 --weights gguf_q4 --no-figure --tracking-uri none
        --hf-methods none)
staged="ngram:1:30>q4:12:50:2>copy:24:6"
lscpu | grep "Model name"; date -u
python experiments/peers.py "${common[@]}" --data humaneval --first-prompt 1 --stride 9 --prompts 4 \
  --temperature 0.7 --seed 0 --ours "ar,copy:16:3,q4:12:50:2,$staged,ngram:1:30>q4:8:50:2>copy:24:6" \
  --out docs/tuning/dev-humaneval-t07
date -u
python experiments/peers.py "${common[@]}" --data mt_bench --first-prompt 1 --stride 5 --prompts 4 \
  --temperature 0 --ours "ar,copy:16:3,q4:8:50:2,q4:12:50:2,$staged,ngram:1:30>q4:8:50:2>copy:24:6" \
  --out docs/tuning/dev-mtbench-t0
date -u
