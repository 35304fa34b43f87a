#!/usr/bin/env bash
# The benchmark session behind the README's results table, second of 2026-12-06 (nothing else
# running): the target's T(n) on torch (4-bit codes, dense) and on llama.cpp over the same GGUF,
# interleaved; the peers run on the HumanEval test split (ours with the target on torch's 4-bit
# path and on llama.cpp, interleaved; HF generate and HF prompt lookup); llama.cpp's own programs
# on the same GGUFs and prompts right after. Every setting is its best on the dev split
# (docs/tuning/: prompt lookup copy:16:3, the 0.5B k 12, the staged default as it is, HF prompt
# lookup 10 with its n-gram size 2, HF assisted with its heuristic schedule). LLAMA_BIN: llama.cpp's build/bin, and the bindings
# importable (docs/llama-cpp.md); without them the script stops at the first llama.cpp step.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
python experiments/bench_step_curve.py --repeats 5 --llama-cpp --rows 1,2,4,8,12,16,24,32 \
  --out docs/bench/step-curve-2026-12-06.md || exit 1
date -u
python experiments/peers.py --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --data humaneval \
  --split test --prompts 4 --max-new-tokens 96 --repeats 1 --batch-sizes 1 --temperature 0 \
  --weights gguf_q4,llama_cpp --hf-methods hf,hf_assisted,hf_prompt_lookup --prompt-lookup 10 --assistant-tokens 0 \
  --no-figure --ours "ar,copy:16:3,q4:12:50:2,ngram:1:30>q4:12:50:2>copy:24:6" \
  --out docs/peers/v8-humaneval-t0
date -u
if [ -n "${LLAMA_BIN:-}" ]; then
  python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --split test --prompts 4 \
    --modes plain,ngram-simple,ngram-mod,draft-simple:16:0.75 --max-new-tokens 96 \
    --json docs/peers/v8-llama-cpp-humaneval-t0.json
fi
date -u
