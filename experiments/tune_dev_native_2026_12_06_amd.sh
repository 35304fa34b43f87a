#!/usr/bin/env bash
# Dev split: the target on its GGUF's own blocks (target.weights=gguf_native) against torch's 4-bit path
# (gguf_q4, the default), interleaved per prompt, on 4 HumanEval dev problems at T = 0, 96 tokens: plain
# decoding, prompt lookup at three lengths (a 16-row verification is one tile of the native kernel, 17 a
# tile and a row), the 4-bit 0.5B, and the staged default with copies up to 24 and up to 15. On a 2-core
# AMD EPYC (AVX-512 BF16/VNNI, no AMX), nothing else running.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
python experiments/peers.py --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --data humaneval \
  --split dev --prompts 4 --max-new-tokens 96 --repeats 1 --batch-sizes 1 --temperature 0 \
  --weights gguf_q4,gguf_native --hf-methods hf \
  --ours "ar,copy:16:3,copy:15:3,copy:8:3,q4:12:50:2,ngram:1:30>q4:12:50:2>route:24,ngram:1:30>q4:12:50:2>route:15" \
  --no-figure --tracking-uri none --out docs/tuning/amd-dev-native-humaneval-t0
date -u
