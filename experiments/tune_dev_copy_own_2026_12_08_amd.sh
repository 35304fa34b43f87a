#!/usr/bin/env bash
# The timed router's copy_own on the dev split (docs/tuning/amd-copy-own-*): in each run `timed:24` is the default
# then (0: the pooled copy record alone), `priced:24` the same router with copy_own 2, `route:24` with 8; the
# routers alone (no level below), as the copies' pricing is what changes. 96 tokens, the target on its GGUF's
# blocks, sampled runs with coupling=gumbel (one text per cell); a 2-core AMD EPYC (Zen 4), nothing else running.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
C=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev --max-new-tokens 96
   --batch-sizes 1 --no-figure --tracking-uri none --weights gguf_native --hf-methods none)
run=experiments/tune_dev_copy_own_2026_12_08_amd.py
three="ar,copy:16:3,timed:24,priced:24,route:24"
python $run "${C[@]}" --repeats 2 --prompts 6 --first-prompt 14 --data humaneval --temperature 0.7 --coupling gumbel \
  --ours "$three" --out docs/tuning/amd-copy-own-humaneval-t07 || exit 1
date -u
python $run "${C[@]}" --repeats 1 --prompts 6 --first-prompt 8 --data humaneval --temperature 0 \
  --ours "$three" --out docs/tuning/amd-copy-own-humaneval-t0
date -u
python $run "${C[@]}" --repeats 1 --prompts 6 --data mt_bench --temperature 0 \
  --ours "$three" --out docs/tuning/amd-copy-own-mtbench-t0
date -u
