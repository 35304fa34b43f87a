#!/usr/bin/env bash
# Dev-split check (AMD EPYC, 2 cores) of the priced router once it cuts each copy to its best-priced
# length (per-token acceptance per match length, the calibrated cost curve): the same problems and
# settings as tune_dev_2026_12_06_amd.sh, the routers against the rule and prompt lookup. Tables
# under docs/tuning/amd-dev-cut-*.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev
        --max-new-tokens 64 --repeats 1 --batch-sizes 1 --weights gguf_q4 --no-figure --tracking-uri none
        --hf-methods none)
low="ngram:1:30>q4:12:50:2"
ours="copy:16:3,$low>copy:24:6,$low>route:24,$low>priced:24"
lscpu | grep "Model name"; date -u
python experiments/peers.py "${common[@]}" --data humaneval --first-prompt 5 --stride 9 --prompts 4 \
  --temperature 0 --ours "$ours" --out docs/tuning/amd-dev-cut-humaneval-t0
date -u
python experiments/peers.py "${common[@]}" --data humaneval --first-prompt 5 --stride 9 --prompts 4 \
  --temperature 0.7 --seed 0 --ours "$ours" --out docs/tuning/amd-dev-cut-humaneval-t07
date -u
python experiments/peers.py "${common[@]}" --data mt_bench --first-prompt 2 --stride 5 --prompts 4 \
  --temperature 0 --ours "$ours" --out docs/tuning/amd-dev-cut-mtbench-t0
date -u
