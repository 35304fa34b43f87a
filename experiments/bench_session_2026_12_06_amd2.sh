#!/usr/bin/env bash
# Test split on a 2-core AMD EPYC (no AMX), nothing else running, after the dev check of the routers
# that cut copies by price (docs/tuning/amd-dev-cut-*): the staged default's rule against the priced
# router on the calibrated cost curve (priced:24) and on linear prices (route:24), beside the
# two-level ablations at their dev best, interleaved per prompt: HumanEval T = 0 (6 problems),
# T = 0.7 over 3 seeds (4 problems), MT-bench first turns T = 0 (6). experiments/oracle.py reads each.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
low="ngram:1:30>q4:12:50:2"
ours="ar,copy:16:3,q4:12:50:2,$low>copy:24:6,$low>route:24,$low>priced:24"
fixed="copy:16:3,q4:12:50:2,$low>copy:24:6"
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split test --max-new-tokens 96
        --batch-sizes 1 --weights gguf_q4 --hf-methods none --no-figure --tracking-uri none --ours "$ours")
lscpu | grep "Model name"; date -u
python experiments/peers.py "${common[@]}" --data humaneval --prompts 6 --repeats 1 --temperature 0 \
  --out docs/peers/v10-amd-humaneval-t0
date -u
python experiments/peers.py "${common[@]}" --data humaneval --prompts 4 --repeats 3 --temperature 0.7 --seed 0 \
  --out docs/peers/v10-amd-humaneval-t07-3-seeds
date -u
python experiments/peers.py "${common[@]}" --data mt_bench --prompts 6 --repeats 1 --temperature 0 \
  --out docs/peers/v10-amd-mtbench-t0
date -u
for run in v10-amd-humaneval-t0 v10-amd-humaneval-t07-3-seeds v10-amd-mtbench-t0; do
  for r in route priced; do
    python experiments/oracle.py docs/peers/$run/measurements.jsonl --router "$low>$r:24" --fixed "$fixed" \
      --out docs/peers/$run/oracle-$r.md
  done
done
