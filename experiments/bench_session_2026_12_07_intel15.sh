#!/usr/bin/env bash
# The README's results (v23) after the timed router's first_look (each prompt's first rounds stay off the
# 0.5B until 6 plain steps were taken; copies do not count) and with peers.py keeping one drafter per
# method through the run (a router's statistics carry over from prompt to prompt, as in the runner's
# jobs): the methods, prompts and order of bench_session_2026_12_07_intel14.sh (v22), llama.cpp's sampled
# runs now seeded as ours (3 samples a prompt); the step curve is v22's (the kernels did not change). A
# 2-core Intel Xeon (AVX-512 BF16/VNNI, AMX-INT8; llama.cpp built with AMX off, docs/llama-cpp.md),
# nothing else running. LLAMA_BIN: llama.cpp's build/bin, with the bindings importable (docs/llama-cpp.md).
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
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v23-intel-humaneval-t0 || exit 1
date -u
M=plain,ngram-simple,ngram-mod,draft-simple:16:0.75
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --split test --prompts 6 --modes $M --max-new-tokens 96 \
  --json docs/peers/v23-intel-llama-cpp-humaneval-t0.json
date -u
python experiments/peers.py "${common[@]}" --repeats 1 --data mt_bench --temperature 0 --weights gguf_native --hf-methods none \
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v23-intel-mtbench-t0
date -u
python experiments/peers.py "${common[@]}" --repeats 3 --data humaneval --temperature 0.7 --weights gguf_native --hf-methods none \
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v23-intel-humaneval-t07
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data mt_bench --split test --prompts 6 --modes $M \
  --max-new-tokens 96 --json docs/peers/v23-intel-llama-cpp-mtbench-t0.json
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data humaneval --split test --prompts 6 --modes $M \
  --max-new-tokens 96 --temp 0.7 --seed 0 --repeats 3 --json docs/peers/v23-intel-llama-cpp-humaneval-t07.json
date -u
