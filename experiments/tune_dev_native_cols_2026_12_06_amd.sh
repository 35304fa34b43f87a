#!/usr/bin/env bash
# Dev split, again, once the native kernel has its `cols` loop (16 weight rows in the lanes, 8 activation
# rows a pass): the target on its GGUF's own blocks (target.weights=gguf_native) against torch's 4-bit
# path (gguf_q4), interleaved per prompt, on the same 4 HumanEval dev problems at T = 0 as
# tune_dev_native_2026_12_06_amd.sh, then 4 MT-bench dev first turns at T = 0 (prose: no copies to
# verify, the one-row step decides). On a 2-core AMD EPYC (AVX-512 BF16/VNNI, no AMX), nothing else running.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
python experiments/peers.py --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --data humaneval \
  --split dev --prompts 4 --max-new-tokens 96 --repeats 1 --batch-sizes 1 --temperature 0 \
  --weights gguf_q4,gguf_native --hf-methods hf \
  --ours "ar,copy:16:3,copy:8:3,q4:12:50:2,ngram:1:30>q4:12:50:2>route:24" \
  --no-figure --tracking-uri none --out docs/tuning/amd-dev-native-cols-humaneval-t0
date -u
python experiments/peers.py --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --data mt_bench \
  --split dev --prompts 4 --max-new-tokens 96 --repeats 1 --batch-sizes 1 --temperature 0 \
  --weights gguf_q4,gguf_native --hf-methods hf \
  --ours "ar,q4:12:50:2,ngram:1:30>q4:12:50:2>route:24" \
  --no-figure --tracking-uri none --out docs/tuning/amd-dev-native-cols-mtbench-t0
date -u
