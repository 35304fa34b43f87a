#!/usr/bin/env bash
# Dev split: the 0.5B draft re-encoded as Q4_K blocks through the native kernel at every row count
# (`n4`, levels.small.model.weights=requant_q4k) against its 4-bit copy through torch's int4 kernel at
# 1-2 rows and bf16 oneDNN above (`q4`, the default before), alone and under the staged default's timed
# router; the target on its GGUF's own blocks (gguf_native). 4 HumanEval dev problems T = 0, 4 MT-bench
# dev first turns T = 0, 96 tokens. On a 2-core AMD EPYC (AVX-512 BF16/VNNI, no AMX), nothing else running.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev --prompts 4
        --max-new-tokens 96 --repeats 1 --batch-sizes 1 --weights gguf_native --hf-methods none
        --no-figure --tracking-uri none)
ours="ar,q4:12:50:2,n4:12:50:2,ngram:1:30>q4:12:50:2>timed:24,ngram:1:30>n4:12:50:2>timed:24"
python experiments/peers.py "${common[@]}" --data humaneval --temperature 0 --ours "$ours" \
  --out docs/tuning/amd-dev-requant-humaneval-t0
date -u
python experiments/peers.py "${common[@]}" --data mt_bench --temperature 0 --ours "$ours" \
  --out docs/tuning/amd-dev-requant-mtbench-t0
date -u
