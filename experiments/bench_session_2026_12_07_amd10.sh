#!/usr/bin/env bash
# The README's results once forwards of the native models (the target on its GGUF's blocks, the 0.5B
# re-encoded) run each decoder layer in C at every row count (one row: qk_kernels.layer1, one call; more
# rows: qk_kernels.layer_rows, two calls around torch's attention) and the timed router prices a plain
# step by its own timed calls (verifications by the curve); on a 2-core AMD EPYC (AVX-512 BF16/VNNI, no
# AMX), nothing else running: the same methods as bench_session_2026_12_06_amd8.sh and _amd9.sh (v17:
# every row count priced by its own timed calls); the step curve's torch-layer plan is the A/B.
# LLAMA_BIN: llama.cpp's build/bin, with the bindings importable (docs/llama-cpp.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
staged="ngram:1:30>n4:12:50:2>timed:24,ngram:1:30>q4:12:50:2>timed:24"
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split test --prompts 6
        --max-new-tokens 96 --repeats 1 --batch-sizes 1 --no-figure --tracking-uri none)
python experiments/peers.py "${common[@]}" --data humaneval --temperature 0 \
  --weights gguf_q4,gguf_native,llama_cpp --hf-methods hf,hf_assisted,hf_prompt_lookup --prompt-lookup 10 --assistant-tokens 0 \
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v18-amd-humaneval-t0 || exit 1
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --split test --prompts 6 \
  --modes plain,ngram-simple,ngram-mod,draft-simple:16:0.75 --max-new-tokens 96 \
  --json docs/peers/v18-amd-llama-cpp-humaneval-t0.json
date -u
python experiments/peers.py "${common[@]}" --data mt_bench --temperature 0 --weights gguf_native --hf-methods none \
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v18-amd-mtbench-t0
date -u
python experiments/peers.py "${common[@]}" --data humaneval --temperature 0.7 --weights gguf_native --hf-methods none \
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v18-amd-humaneval-t07
date -u
python experiments/bench_step_curve.py --native --llama-cpp --repeats 5 --rows 1,2,3,4,6,8,12,16,17,24,32 \
  --out docs/bench/step-curve-2026-12-07-amd-v18.md
date -u
