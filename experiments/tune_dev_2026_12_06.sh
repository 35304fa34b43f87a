#!/usr/bin/env bash
# Dev-split tuning of the staged default's settings (2026-12-06, nothing else running): on
# HumanEval dev problems (stagedspec/prompts/splits.py) at T = 0 and T = 0.7 and on MT-bench dev
# first turns at T = 0, the default's variants one setting at a time (the 0.5B's k, the bypass's
# min match, the router) beside its two-level ablations. Tables under docs/tuning/; the defaults'
# "# tuned on:" notes in conf/drafter/ cite them.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev --prompts 4
        --max-new-tokens 64 --repeats 1 --batch-sizes 1 --weights gguf_q4 --hf-methods none --no-figure
        --tracking-uri none)
lscpu | grep "Model name"; date -u
python experiments/peers.py "${common[@]}" --data humaneval --temperature 0 \
  --ours "ar,copy:10:1,copy:24:4,q4:8:50:2,q4:12:50:2,q4:16:50:2,ngram:1:30>q4:8:50:2>copy:24:6,ngram:1:30>q4:12:50:2>copy:24:6,ngram:1:30>q4:16:50:2>copy:24:6,ngram:1:30>q4:12:50:2>copy:24:4,ngram:1:30>q4:12:50:2>copy:24:8,ngram:1:30>q4:12:50:2>route:24" \
  --out docs/tuning/dev-humaneval-t0
date -u
python experiments/peers.py "${common[@]}" --data humaneval --temperature 0.7 --seed 0 \
  --ours "ar,copy:10:1,q4:12:50:2,ngram:1:30>q4:12:50:2>copy:24:6,ngram:1:30>q4:12:50:2>copy:24:4,ngram:1:30>q4:12:50:2>route:24" \
  --out docs/tuning/dev-humaneval-t07
date -u
python experiments/peers.py "${common[@]}" --data mt_bench --temperature 0 \
  --ours "ar,copy:10:1,q4:12:50:2,ngram:1:30>q4:12:50:2>copy:24:6,ngram:1:30>q4:12:50:2>route:24" \
  --out docs/tuning/dev-mtbench-t0
date -u
