#!/usr/bin/env bash
# The README's results (v22) after the cols loop came to take its integer sums from AMX tiles on CPUs with
# AMX-INT8 (q4 with the group scales folded into the tiles; the same bits as the VNNI loop): the methods,
# prompts and order of bench_session_2026_12_07_intel13.sh (v21), then llama.cpp's programs on MT-bench and
# sampled HumanEval (bench_llama_cpp_more_2026_12_07_intel.sh's), then the step curve with the native plan
# on AMX tiles and on VNNI interleaved. A 2-core Intel Xeon (AVX-512 BF16/VNNI, AMX-INT8; llama.cpp built
# with AMX off: its AMX build dies with SIGILL here, docs/llama-cpp.md), nothing else running. LLAMA_BIN:
# llama.cpp's build/bin, with the bindings importable (docs/llama-cpp.md).
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
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v22-intel-humaneval-t0 || exit 1
date -u
M=plain,ngram-simple,ngram-mod,draft-simple:16:0.75
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --split test --prompts 6 --modes $M --max-new-tokens 96 \
  --json docs/peers/v22-intel-llama-cpp-humaneval-t0.json
date -u
python experiments/peers.py "${common[@]}" --repeats 1 --data mt_bench --temperature 0 --weights gguf_native --hf-methods none \
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v22-intel-mtbench-t0
date -u
python experiments/peers.py "${common[@]}" --repeats 3 --data humaneval --temperature 0.7 --weights gguf_native --hf-methods none \
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v22-intel-humaneval-t07
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data mt_bench --split test --prompts 6 --modes $M \
  --max-new-tokens 96 --json docs/peers/v22-intel-llama-cpp-mtbench-t0.json
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data humaneval --split test --prompts 6 --modes $M \
  --max-new-tokens 96 --temp 0.7 --json docs/peers/v22-intel-llama-cpp-humaneval-t07.json
date -u
python experiments/bench_step_curve.py --native --amx-ab --llama-cpp --repeats 5 --rows 1,2,3,4,6,8,12,16,17,24,32 \
  --out docs/bench/step-curve-2026-12-07-intel-v22.md
date -u
