#!/usr/bin/env bash
# v29 on a 2-core AMD EPYC with AVX-512 (Zen 4, family 25 model 17: VNNI and BF16, no AMX), after the rows loop took
# a block's elements in scale-group lanes (1b5508e): v28's sets and methods (the first 6 HumanEval test problems at
# T = 0 and at T = 0.7 with 3 seeds under gumbel, the first 6 MT-bench test first turns at T = 0; 96 tokens); then
# llama.cpp's plain decoding and its two n-gram modes (v26-v28's best on every set; its 0.5B draft mode was never
# best) on all three sets, right after. Nothing else running. LLAMA_BIN: llama.cpp's build/bin.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
staged="ngram:1:30>n4:12:50:2>timed:24"
ours="ar,copy:16:3,timed:24,n4:12:50:2,$staged"
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split test --prompts 6
        --max-new-tokens 96 --batch-sizes 1 --no-figure --tracking-uri none --weights gguf_native --hf-methods none
        --ours "$ours")
M=plain,ngram-simple,ngram-mod
python experiments/peers.py "${common[@]}" --repeats 1 --data humaneval --temperature 0 \
  --out docs/peers/v29-amd-humaneval-t0 || exit 1
date -u
python experiments/peers.py "${common[@]}" --repeats 1 --data mt_bench --temperature 0 \
  --out docs/peers/v29-amd-mtbench-t0 || exit 1
date -u
python experiments/peers.py "${common[@]}" --repeats 3 --data humaneval --temperature 0.7 --coupling gumbel \
  --out docs/peers/v29-amd-humaneval-t07-gumbel || exit 1
date -u
for data in humaneval mt_bench; do
  python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data $data --split test --prompts 6 --modes $M \
    --max-new-tokens 96 --temp 0 --repeats 1 --json docs/peers/v29-amd-llama-cpp-${data//_/}-t0.json
  date -u
done
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data humaneval --split test --prompts 6 --modes $M \
  --max-new-tokens 96 --temp 0.7 --seed 0 --repeats 3 --json docs/peers/v29-amd-llama-cpp-humaneval-t07.json
date -u
