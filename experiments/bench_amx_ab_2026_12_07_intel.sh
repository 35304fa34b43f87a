#!/usr/bin/env bash
# AMX tiles against VNNI for the cols loop, end to end (bench_amx_ab_2026_12_07_intel.py): plain decoding,
# prompt lookup and the staged default, HumanEval dev 0-7 at T = 0, 96 tokens, the target on its GGUF's
# blocks; a 2-core Intel Xeon (AMX-INT8), nothing else running. Table: docs/tuning/intel-amx-ab-humaneval-t0.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
S="ngram:1:30>n4:12:50:2>timed:24"
python experiments/bench_amx_ab_2026_12_07_intel.py --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b \
  --dtype bfloat16 --split dev --max-new-tokens 96 --batch-sizes 1 --no-figure --tracking-uri none \
  --weights gguf_native --hf-methods none --repeats 1 --prompts 8 --first-prompt 0 --data humaneval \
  --temperature 0 --ours "ar,copy:16:3,$S" --out docs/tuning/intel-amx-ab-humaneval-t0
date -u
