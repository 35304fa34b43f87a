#!/usr/bin/env bash
# The README's results (v21) after copies came to be priced per token by the match each continues (a copy's
# i-th token after an m-token match by the acceptance of (m + i - 1)-token matches; chosen on dev:
# tune_dev_runs_2026_12_07_intel.sh), with each prompt its own seed at T = 0.7. The same methods, prompts
# and order as bench_session_2026_12_07_amd12.sh (v20), on a 2-core Intel Xeon (AVX-512 BF16/VNNI, AMX
# flags; llama.cpp built with AMX off), nothing else running. LLAMA_BIN: llama.cpp's build/bin, with the
# bindings importable (docs/llama-cpp.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
staged="ngram:1:30>n4:12:50:2>timed:24,ngram:1:30>q4:12:50:2>timed:24"
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split test --prompts 6
        --max-new-tokens 96 --batch-sizes 1 --no-figure --tracking-uri none)
python experiments/peers.py "${common[@]}" --repeats 1 --data humaneval --temperature 0 \
  --weights gguf_q4,gguf_native,llama_cpp --hf-methods hf,hf_assisted,hf_prompt_lookup --prompt-lookup 10 --assistant-tokens 0 \
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v21-intel-humaneval-t0 || exit 1
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --split test --prompts 6 \
  --modes plain,ngram-simple,ngram-mod,draft-simple:16:0.75 --max-new-tokens 96 \
  --json docs/peers/v21-intel-llama-cpp-humaneval-t0.json
date -u
python experiments/peers.py "${common[@]}" --repeats 1 --data mt_bench --temperature 0 --weights gguf_native --hf-methods none \
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v21-intel-mtbench-t0
date -u
python experiments/peers.py "${common[@]}" --repeats 3 --data humaneval --temperature 0.7 --weights gguf_native --hf-methods none \
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v21-intel-humaneval-t07
date -u
