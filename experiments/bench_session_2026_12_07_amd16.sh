#!/usr/bin/env bash
# v24 on a 2-core AMD EPYC without AVX-512 (Zen 2: AVX2, FMA), after the native kernel's AVX2 rows loop (before
# it, this CPU ran the kernel's scalar build): the prompts and order of bench_session_2026_12_07_intel15.sh (v23),
# less everything that runs bf16 GEMMs (torch's 4-bit target, the 0.5B on torch's 4-bit rows, HF's generate):
# on this CPU they grow ~190 ms a row for the 1.5B, a verification of 16 rows takes seconds. llama.cpp built with
# AVX2 / FMA / F16C on and AVX-512 off (docs/llama-cpp.md), nothing else running. LLAMA_BIN: llama.cpp's
# build/bin, with the bindings importable.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
staged="ngram:1:30>n4:12:50:2>timed:24"
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split test --prompts 6
        --max-new-tokens 96 --batch-sizes 1 --no-figure --tracking-uri none)
python experiments/peers.py "${common[@]}" --repeats 1 --data humaneval --temperature 0 \
  --weights gguf_native,llama_cpp --hf-methods none \
  --ours "ar,copy:16:3,n4:12:50:2,$staged" --out docs/peers/v24-amd-humaneval-t0 || exit 1
date -u
M=plain,ngram-simple,ngram-mod,draft-simple:16:0.75
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --split test --prompts 6 --modes $M --max-new-tokens 96 \
  --json docs/peers/v24-amd-llama-cpp-humaneval-t0.json
date -u
python experiments/peers.py "${common[@]}" --repeats 1 --data mt_bench --temperature 0 --weights gguf_native --hf-methods none \
  --ours "ar,copy:16:3,n4:12:50:2,$staged" --out docs/peers/v24-amd-mtbench-t0
date -u
python experiments/peers.py "${common[@]}" --repeats 3 --data humaneval --temperature 0.7 --weights gguf_native --hf-methods none \
  --ours "ar,copy:16:3,n4:12:50:2,$staged" --out docs/peers/v24-amd-humaneval-t07
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data mt_bench --split test --prompts 6 --modes $M \
  --max-new-tokens 96 --json docs/peers/v24-amd-llama-cpp-mtbench-t0.json
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data humaneval --split test --prompts 6 --modes $M \
  --max-new-tokens 96 --temp 0.7 --seed 0 --repeats 3 --json docs/peers/v24-amd-llama-cpp-humaneval-t07.json
date -u
