#!/usr/bin/env bash
# llama.cpp's programs on the two sets v21 ran only ours on (bench_session_2026_12_07_intel13.sh): MT-bench first
# turns at T = 0 and HumanEval at T = 0.7 (its own sampler, --temp 0.7), the first 6 test prompts, 96 tokens, the
# modes of v21; a 2-core Intel Xeon, nothing else running. LLAMA_BIN: llama.cpp's build/bin (docs/llama-cpp.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
M=plain,ngram-simple,ngram-mod,draft-simple:16:0.75
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data mt_bench --split test --prompts 6 --modes $M \
  --max-new-tokens 96 --json docs/peers/v21-intel-llama-cpp-mtbench-t0.json
date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --data humaneval --split test --prompts 6 --modes $M \
  --max-new-tokens 96 --temp 0.7 --json docs/peers/v21-intel-llama-cpp-humaneval-t07.json
date -u
