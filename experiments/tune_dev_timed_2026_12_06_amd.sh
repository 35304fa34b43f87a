#!/usr/bin/env bash
# Dev split: the staged default's router priced in measured seconds with a plain step as a third proposal
# (`timed:24`, levels.copy.route=timed) against the priced router on linear prices (`route:24`, the
# default before), beside prompt lookup, the 0.5B and plain decoding; the target on its GGUF's own
# blocks (target.weights=gguf_native, the default). 4 HumanEval dev problems at T = 0 and at T = 0.7,
# 4 MT-bench dev first turns at T = 0, 96 tokens. On a 2-core AMD EPYC (AVX-512 BF16/VNNI, no AMX),
# nothing else running.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev --prompts 4
        --max-new-tokens 96 --repeats 1 --batch-sizes 1 --weights gguf_native --hf-methods none
        --no-figure --tracking-uri none)
staged="ngram:1:30>q4:12:50:2>route:24,ngram:1:30>q4:12:50:2>timed:24"
python experiments/peers.py "${common[@]}" --data humaneval --temperature 0 \
  --ours "ar,copy:16:3,q4:12:50:2,$staged" --out docs/tuning/amd-dev-timed-humaneval-t0
date -u
python experiments/peers.py "${common[@]}" --data mt_bench --temperature 0 \
  --ours "ar,q4:12:50:2,$staged" --out docs/tuning/amd-dev-timed-mtbench-t0
date -u
python experiments/peers.py "${common[@]}" --data humaneval --temperature 0.7 \
  --ours "copy:16:3,$staged" --out docs/tuning/amd-dev-timed-humaneval-t07
date -u
