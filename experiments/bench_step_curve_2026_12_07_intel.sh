#!/usr/bin/env bash
# The step curve (v21) on the machine of bench_session_2026_12_07_intel13.sh, right after it: a 2-core Intel
# Xeon (AVX-512 BF16/VNNI, AMX flags; llama.cpp built with AMX off), nothing else running; the rows and
# repeats of v18's curve. LLAMA_CPP_LIB_PATH / PYTHONPATH: llama.cpp's bindings (docs/llama-cpp.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
python experiments/bench_step_curve.py --native --llama-cpp --repeats 5 --rows 1,2,3,4,6,8,12,16,17,24,32 \
  --out docs/bench/step-curve-2026-12-07-intel-v21.md
date -u
