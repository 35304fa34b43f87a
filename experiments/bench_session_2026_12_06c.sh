#!/usr/bin/env bash
# Staging against its best two-level ablations on the test split beyond greedy HumanEval (2026-12-06,
# nothing else running): HumanEval T = 0.7 over 3 seeds (repeat r samples with seed r) and MT-bench
# first turns at T = 0; the settings chosen on dev (docs/tuning/README.md), the target on torch.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split test --prompts 4
        --batch-sizes 1 --weights gguf_q4 --hf-methods none --no-figure --tracking-uri none
        --ours "ar,copy:16:3,q4:12:50:2,ngram:1:30>q4:12:50:2>copy:24:6")
lscpu | grep "Model name"; date -u
python experiments/peers.py "${common[@]}" --data humaneval --max-new-tokens 96 --temperature 0.7 --repeats 3 \
  --out docs/peers/v8-humaneval-t07-3-seeds
date -u
python experiments/peers.py "${common[@]}" --data mt_bench --max-new-tokens 96 --temperature 0 --repeats 1 \
  --out docs/peers/v8-mtbench-t0
date -u
