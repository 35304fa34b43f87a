#!/usr/bin/env bash
# The README's results (v20) after three changes made later on 2026-12-07: sample() inverts the CDF where it
# called torch.multinomial (0.37 against 3.2 ms a draw over the vocabulary), prepack makes the native blocks'
# cols panels with the plan (the 0.5B's were made inside its first lazy round below), and the timed router's
# explore clock no longer counts rounds of copies (chosen on dev: tune_dev_explore_2026_12_07_amd.sh). The same
# methods, prompts and order as bench_session_2026_12_07_amd11.sh (v19) but HumanEval at T = 0.7 with 3 seeds
# (--repeats 3: seeds 0, 1, 2); the step curve not re-run (kernels unchanged: the README keeps v18's); a 2-core
# AMD EPYC, nothing else running. LLAMA_BIN: llama.cpp's build/bin, with the bindings importable (docs/llama-cpp.md).
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
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v20-amd-humaneval-t0 || exit 1
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --split test --prompts 6 \
  --modes plain,ngram-simple,ngram-mod,draft-simple:16:0.75 --max-new-tokens 96 \
  --json docs/peers/v20-amd-llama-cpp-humaneval-t0.json
date -u
python experiments/peers.py "${common[@]}" --repeats 1 --data mt_bench --temperature 0 --weights gguf_native --hf-methods none \
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v20-amd-mtbench-t0
date -u
python experiments/peers.py "${common[@]}" --repeats 3 --data humaneval --temperature 0.7 --weights gguf_native --hf-methods none \
  --ours "ar,copy:16:3,q4:12:50:2,n4:12:50:2,$staged" --out docs/peers/v20-amd-humaneval-t07
date -u
