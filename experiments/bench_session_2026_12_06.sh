#!/usr/bin/env bash
# The benchmark session behind the README's results table (2026-12-06, nothing else running):
# the target's T(n) on its 4-bit codes against dense, the peers run (ours on gguf_q4 and dense,
# HF prompt lookup) and llama.cpp on the same GGUFs and prompts. LLAMA_BIN: llama.cpp's build/bin
# (README, "llama.cpp as a peer"); without it the llama.cpp part is skipped.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
python experiments/bench_step_curve.py --repeats 3 --out docs/bench/step-curve-2026-12-05.md
date -u
python experiments/peers.py --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --data humaneval \
  --split test --prompts 4 --max-new-tokens 96 --repeats 1 --batch-sizes 1 --temperature 0 \
  --weights gguf_q4,dense --hf-methods hf_prompt_lookup --prompt-lookup 10,10:3 --no-figure \
  --ours "ar,copy:10:1,q4:12:50:2,ngram:1:30>q4:12:50:2>copy:24:6,ngram:1:30>q4:12:50:2>route:24,ngram:1:30>copy:24:6>q4:24:50:2" \
  --out docs/peers/v7-humaneval-t0
date -u
if [ -n "${LLAMA_BIN:-}" ]; then
  python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --split test --prompts 4 \
    --modes plain,ngram-simple,draft-simple:16:0.75 --max-new-tokens 96 --json docs/peers/v7-llama-cpp-humaneval-t0.json
fi
date -u
