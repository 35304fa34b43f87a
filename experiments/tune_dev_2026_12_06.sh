#!/usr/bin/env bash
# Dev-split tuning of the staged default's settings and of the peers' (2026-12-06, nothing else
# running). Dev problems not used by any earlier tuning (stagedspec/prompts/splits.py): HumanEval
# 3, 30, 57, 84, 111, 138 (dev list from its 2nd item, every 9th) and MT-bench first turns 83, 93,
# ..., 133 (dev list from its 2nd item, every 5th: one per category). One setting at a time:
# prompt lookup's span and min match, the 0.5B's k alone and staged, the bypass's min match, the
# router; HF prompt lookup (num tokens x n-gram size) and HF assisted (heuristic, constant 4/8/12).
# Tables under docs/tuning/; the defaults' "# tuned on:" notes in conf/drafter/ cite them.
# On 2026-12-06 it ran its T = 0 part only (05:34-05:51 UTC, docs/tuning/dev-humaneval-t0); the rest
# ran cut to fit the session, at T = 0's best settings, as tune_dev_2026_12_06b.sh.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
common=(--target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --split dev
        --max-new-tokens 64 --repeats 1 --batch-sizes 1 --weights gguf_q4 --no-figure --tracking-uri none)
he=(--data humaneval --first-prompt 1 --stride 9 --prompts 6)
mt=(--data mt_bench --first-prompt 1 --stride 5 --prompts 6)
staged="ngram:1:30>q4:12:50:2>copy:24:6"
lscpu | grep "Model name"; date -u
python experiments/peers.py "${common[@]}" "${he[@]}" --temperature 0 \
  --hf-methods all --prompt-lookup 10,10:3,20:3,20:4 --assistant-tokens 4,8,12 \
  --ours "ar,copy:10:1,copy:16:1,copy:24:1,copy:16:3,q4:8:50:2,q4:12:50:2,q4:16:50:2,ngram:1:30>q4:8:50:2>copy:24:6,$staged,ngram:1:30>q4:16:50:2>copy:24:6,ngram:1:30>q4:12:50:2>copy:24:4,ngram:1:30>q4:12:50:2>copy:24:8,ngram:1:30>q4:12:50:2>route:24" \
  --out docs/tuning/dev-humaneval-t0
date -u
python experiments/peers.py "${common[@]}" "${he[@]}" --temperature 0.7 --seed 0 --hf-methods none \
  --ours "ar,copy:16:1,q4:12:50:2,$staged,ngram:1:30>q4:12:50:2>copy:24:4,ngram:1:30>q4:12:50:2>route:24" \
  --out docs/tuning/dev-humaneval-t07
date -u
python experiments/peers.py "${common[@]}" "${mt[@]}" --temperature 0 --hf-methods none \
  --ours "ar,copy:10:1,q4:8:50:2,q4:12:50:2,$staged,ngram:1:30>q4:8:50:2>copy:24:6,ngram:1:30>q4:12:50:2>route:24" \
  --out docs/tuning/dev-mtbench-t0
date -u
if python -c "import llama_cpp" 2>/dev/null; then  # the target on llama.cpp: the 0.5B's k and the copy span there
  python experiments/peers.py "${common[@]/gguf_q4/llama_cpp}" "${he[@]}" --temperature 0 --hf-methods none \
    --ours "ar,copy:10:1,copy:16:1,q4:8:50:2,q4:12:50:2,ngram:1:30>q4:8:50:2>copy:24:6,$staged" \
    --out docs/tuning/dev-humaneval-t0-llama-cpp
  date -u
fi
