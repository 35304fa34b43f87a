#!/usr/bin/env bash
# v27 on a 2-core AMD EPYC with AVX-512 (Zen 4, family 25 model 17: VNNI and BF16, no AMX): v26's sampled set
# (the first 6 HumanEval test problems, 96 tokens, T = 0.7, 3 seeds, each prompt its own) with `--coupling gumbel`:
# every one of our methods emits the same tokens for a cell's seed, so per-prompt ratios and the router's oracle
# compare one text. Then llama.cpp's programs on the same set, right after (their own sampler: not the same texts).
# T = 0 and MT-bench are v26's (greedy: unchanged by the coupling). Nothing else running. LLAMA_BIN: llama.cpp's
# build/bin. As run (00:03-00:15 UTC): ours completed; the llama.cpp pass was stopped (a test ran beside it) and
# not kept: llama.cpp's sampled figures are v28's (bench_session_2026_12_08_amd19.sh).
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
python experiments/peers.py "${common[@]}" --repeats 3 --data humaneval --temperature 0.7 --coupling gumbel \
  --weights gguf_native --hf-methods none --ours "$ours" --out docs/peers/v27-amd-humaneval-t07-gumbel || exit 1
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data humaneval --split test --prompts 6 --modes $M \
  --max-new-tokens 96 --temp 0.7 --seed 0 --repeats 3 --json docs/peers/v27-amd-llama-cpp-humaneval-t07.json
date -u
