#!/usr/bin/env bash
# explore_cold on the test split (v25), after it was chosen on dev (tune_dev_explore_cold_2026_12_07_amd.sh):
# the staged default (`timed:24`, explore_cold off) beside the same router with it on (`priced:24` through the
# tuning script: the default before) and the ablations of v24, interleaved; MT-bench and HumanEval first 6 test
# problems, 96 tokens, T = 0, the target on its GGUF's blocks. A 2-core AMD EPYC (Zen 2), nothing else running.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
S="ngram:1:30>n4:12:50:2"
C=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split test --prompts 6 --max-new-tokens 96
   --batch-sizes 1 --no-figure --tracking-uri none --weights gguf_native --hf-methods none --repeats 1 --temperature 0)
run=experiments/tune_dev_explore_cold_2026_12_07_amd.py
python $run "${C[@]}" --data mt_bench --ours "ar,copy:16:3,n4:12:50:2,$S>timed:24,$S>priced:24" \
  --out docs/peers/v25-amd-explore-cold-mtbench-t0 || exit 1
date -u
python $run "${C[@]}" --data humaneval --ours "ar,copy:16:3,n4:12:50:2,$S>timed:24,$S>priced:24" \
  --out docs/peers/v25-amd-explore-cold-humaneval-t0
date -u
