#!/usr/bin/env bash
# v26 on a 2-core AMD EPYC with AVX-512 (Zen 4, family 25 model 17: VNNI and BF16, no AMX), the prompts, order and
# methods of v24 (bench_session_2026_12_07_amd16.sh) plus `timed:24` alone (the staged default's router with no
# level below: copies priced against plain steps, a two-level ablation) after Token Recycling was tried on dev and
# not adopted. llama.cpp built with AVX2 / FMA / F16C / AVX-512 (VBMI, VNNI, BF16) on and AMX off
# (docs/llama-cpp.md), its programs right after ours on each set; nothing else running. LLAMA_BIN: llama.cpp's
# build/bin, with the bindings importable.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
staged="ngram:1:30>n4:12:50:2>timed:24"
ours="ar,copy:16:3,timed:24,n4:12:50:2,$staged"
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split test --prompts 6
        --max-new-tokens 96 --batch-sizes 1 --no-figure --tracking-uri none)
M=plain,ngram-simple,ngram-mod,draft-simple:16:0.75
python experiments/peers.py "${common[@]}" --repeats 1 --data humaneval --temperature 0 \
  --weights gguf_native,llama_cpp --hf-methods none --ours "$ours" --out docs/peers/v26-amd-humaneval-t0 || exit 1
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --split test --prompts 6 --modes $M --max-new-tokens 96 \
  --json docs/peers/v26-amd-llama-cpp-humaneval-t0.json
date -u
python experiments/peers.py "${common[@]}" --repeats 1 --data mt_bench --temperature 0 --weights gguf_native \
  --hf-methods none --ours "$ours" --out docs/peers/v26-amd-mtbench-t0
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data mt_bench --split test --prompts 6 --modes $M \
  --max-new-tokens 96 --json docs/peers/v26-amd-llama-cpp-mtbench-t0.json
date -u
python experiments/peers.py "${common[@]}" --repeats 3 --data humaneval --temperature 0.7 --weights gguf_native \
  --hf-methods none --ours "$ours" --out docs/peers/v26-amd-humaneval-t07
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data humaneval --split test --prompts 6 --modes $M \
  --max-new-tokens 96 --temp 0.7 --seed 0 --repeats 3 --json docs/peers/v26-amd-llama-cpp-humaneval-t07.json
date -u
