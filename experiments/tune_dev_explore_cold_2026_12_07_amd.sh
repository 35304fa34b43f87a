#!/usr/bin/env bash
# The timed router's explore_cold on the dev split (docs/tuning/amd-explore-cold-*): in each run `timed:24` is the
# router's default, `priced:24` the same router with explore_cold on (the behaviour before the setting), `route:24`
# with it off. 96 tokens, the target on its GGUF's blocks, one drafter per method through each run; a 2-core AMD
# EPYC (Zen 2: AVX2, no AVX-512), nothing else running.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
S="ngram:1:30>n4:12:50:2"
C=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev --max-new-tokens 96
   --batch-sizes 1 --no-figure --tracking-uri none --weights gguf_native --hf-methods none)
run=experiments/tune_dev_explore_cold_2026_12_07_amd.py
three="ar,copy:16:3,$S>timed:24,$S>priced:24,$S>route:24"
python $run "${C[@]}" --repeats 1 --prompts 6 --first-prompt 20 --data mt_bench --temperature 0 \
  --ours "$three" --out docs/tuning/amd-explore-cold-mtbench-t0 || exit 1
date -u
python $run "${C[@]}" --repeats 1 --prompts 8 --first-prompt 0 --data humaneval --temperature 0 \
  --ours "$three" --out docs/tuning/amd-explore-cold-humaneval-t0
date -u
