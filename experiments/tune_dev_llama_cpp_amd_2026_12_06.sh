#!/usr/bin/env bash
# Dev-split check on a 2-core AMD EPYC (no AMX), where llama.cpp's one-row step costs 36 ms against
# torch's 85 ms but its 16-row step 263 ms against 196: our methods with the target on llama.cpp
# (target.backend=llama_cpp) at short drafts, to find their best there. HumanEval dev problems as
# tune_dev_2026_12_06_amd.sh. Needs the bindings and LLAMA_CPP_LIB_PATH (docs/llama-cpp.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
python experiments/peers.py --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev \
  --max-new-tokens 64 --repeats 1 --batch-sizes 1 --weights llama_cpp --no-figure --tracking-uri none \
  --hf-methods none --data humaneval --first-prompt 5 --stride 9 --prompts 4 --temperature 0 \
  --ours "ar,copy:2:3,copy:4:3,copy:8:3,copy:16:3,ngram:1:30>q4:4:50:2>copy:8:6" \
  --out docs/tuning/amd-dev-llama-cpp-humaneval-t0
date -u
