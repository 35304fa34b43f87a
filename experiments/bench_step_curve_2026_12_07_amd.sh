#!/usr/bin/env bash
# The step curve (v24) on a 2-core AMD EPYC (Zen 2: AVX2, FMA, no AVX-512) with the native kernel's AVX2 rows
# loop; llama.cpp built with AVX2 on and AVX-512 off; nothing else running; v21's rows and repeats.
# LLAMA_CPP_LIB_PATH / PYTHONPATH: llama.cpp's bindings (docs/llama-cpp.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
python experiments/bench_step_curve.py --native --llama-cpp --repeats 5 --rows 1,2,3,4,6,8,12,16,17,24,32 \
  --out docs/bench/step-curve-2026-12-07-amd-v24.md
date -u
