#!/usr/bin/env bash
# Dev-split tuning for target.backend=llama_cpp (2026-12-06, nothing else running): llama.cpp's T(n)
# here grows fast with the rows (docs/bench/step-curve-2026-12-06.md: 63 ms at 1 row, 257 at 16),
# so shorter copies and drafts are tried: prompt lookup's span, the 0.5B's k and alternatives, the
# bypass's span. Same dev problems as tune_dev_2026_12_06.sh (HumanEval 3, 30, 57, 84, 111, 138, T = 0).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
python experiments/peers.py --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev \
  --max-new-tokens 64 --repeats 1 --batch-sizes 1 --weights llama_cpp --no-figure --tracking-uri none \
  --hf-methods none --data humaneval --first-prompt 1 --stride 9 --prompts 6 --temperature 0 \
  --ours "ar,copy:8:3,copy:12:3,copy:16:3,q4:4:50,q4:6:50,q4:8:50:2,ngram:1:30>q4:4:50>copy:8:4,ngram:1:30>q4:6:50>copy:12:6,ngram:1:30>q4:8:50:2>copy:16:6,ngram:1:30>q4:12:50:2>copy:24:6" \
  --out docs/tuning/dev-humaneval-t0-llama-cpp
date -u
