#!/usr/bin/env bash
# Dev-split check of the priced router with the machine's calibrated cost curve (priced:24) against
# the rule (copy:24:6, the default) and the priced router's linear defaults (route:24), beside the
# two-level ablations, on a 2-core AMD EPYC (no AMX: a verification of 25 rows costs ~3x a plain
# step here, against ~1.5x on the Intel Xeon the defaults were tuned on). HumanEval dev problems no
# earlier check used (--first-prompt 5 --stride 9) at T = 0 and 0.7, MT-bench dev first turns at T = 0.
# Tables under docs/tuning/amd-*.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev
        --max-new-tokens 64 --repeats 1 --batch-sizes 1 --weights gguf_q4 --no-figure --tracking-uri none
        --hf-methods none)
low="ngram:1:30>q4:12:50:2"
ours="ar,copy:16:3,q4:12:50:2,$low>copy:24:6,$low>route:24,$low>priced:24"
lscpu | grep "Model name"; date -u
python experiments/peers.py "${common[@]}" --data humaneval --first-prompt 5 --stride 9 --prompts 4 \
  --temperature 0 --ours "$ours" --out docs/tuning/amd-dev-humaneval-t0
date -u
python experiments/peers.py "${common[@]}" --data humaneval --first-prompt 5 --stride 9 --prompts 4 \
  --temperature 0.7 --seed 0 --ours "$ours" --out docs/tuning/amd-dev-humaneval-t07
date -u
python experiments/peers.py "${common[@]}" --data mt_bench --first-prompt 2 --stride 5 --prompts 4 \
  --temperature 0 --ours "$ours" --out docs/tuning/amd-dev-mtbench-t0
date -u
