#!/usr/bin/env bash
# Test-split session on a 2-core AMD EPYC (AVX-512 BF16/VNNI, no AMX), nothing else running: the
# target's T(n) on torch (4-bit codes, dense) and on llama.cpp over the same GGUF, interleaved; the
# peers run on the HumanEval test split at T = 0 with the staged default (rule), the priced router
# on this machine's calibrated cost curve (priced:24) and its linear defaults (route:24), beside
# the two-level ablations at their dev best, interleaved per prompt (experiments/oracle.py reads it:
# each router against the best fixed routing per prompt); then llama.cpp's own programs on the same
# GGUFs and prompts. LLAMA_BIN: llama.cpp's build/bin with the bindings importable (docs/llama-cpp.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
if [ -n "${LLAMA_BIN:-}" ]; then cpp=--llama-cpp; else cpp=; fi
python experiments/bench_step_curve.py --repeats 3 $cpp --rows 1,2,4,8,12,16,24,32 \
  --out docs/bench/step-curve-2026-12-06-amd.md || exit 1
date -u
low="ngram:1:30>q4:12:50:2"
python experiments/peers.py --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --data humaneval \
  --split test --prompts 6 --max-new-tokens 96 --repeats 1 --batch-sizes 1 --temperature 0 \
  --weights gguf_q4 --hf-methods hf_prompt_lookup --prompt-lookup 10 --no-figure --tracking-uri none \
  --ours "ar,copy:16:3,q4:12:50:2,$low>copy:24:6,$low>route:24,$low>priced:24" \
  --out docs/peers/v9-amd-humaneval-t0
date -u
python experiments/oracle.py docs/peers/v9-amd-humaneval-t0/measurements.jsonl --router "$low>priced:24" \
  --fixed "copy:16:3,q4:12:50:2,$low>copy:24:6" --out docs/peers/v9-amd-humaneval-t0/oracle-priced.md
python experiments/oracle.py docs/peers/v9-amd-humaneval-t0/measurements.jsonl --router "$low>route:24" \
  --fixed "copy:16:3,q4:12:50:2,$low>copy:24:6" --out docs/peers/v9-amd-humaneval-t0/oracle-route.md
if [ -n "${LLAMA_BIN:-}" ]; then
  python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --split test --prompts 6 \
    --modes plain,ngram-simple,ngram-mod --max-new-tokens 96 \
    --json docs/peers/v9-amd-llama-cpp-humaneval-t0.json
fi
date -u
