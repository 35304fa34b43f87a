#!/usr/bin/env bash
# One benchmark session, nothing else running: T(n), peers (ours q4 vs dense, HF lookup), llama.cpp.
set -uo pipefail
cd /work/main
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
python experiments/bench_step_curve.py --repeats 3 --out docs/bench/step-curve-2026-12-05.md 2>&1 | grep -v Warning | tail -12
date -u
python experiments/peers.py --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --data humaneval \
  --split test --prompts 4 --max-new-tokens 96 --repeats 1 --batch-sizes 1 --temperature 0 \
  --weights gguf_q4,dense --hf-methods hf_prompt_lookup --prompt-lookup 10,10:3 --no-figure \
  --ours "ar,copy:10:1,q4:12:50:2,ngram:1:30>q4:12:50:2>copy:24:6,ngram:1:30>q4:12:50:2>route:24,ngram:1:30>copy:24:6>q4:24:50:2" \
  --out docs/peers/v7-humaneval-t0 2>&1 | grep -v Warning | tail -30
date -u
python experiments/llama_cpp_peer.py --bin /work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin \
  --split test --prompts 4 --modes plain,ngram-simple,draft-simple:16:0.75 --max-new-tokens 96 --work /tmp/llw \
  --json docs/peers/v7-llama-cpp-humaneval-t0.json 2>&1 | grep -v Warning | tail -40
date -u
