#!/usr/bin/env bash
# The target's step T(n) on the 2-core AMD EPYC (Zen 4: AVX-512 VNNI and BF16, no AMX) of v26, full forwards
# (decoder and head) beside the kernel calibration's GEMM-only curve the router prices by; llama.cpp's AVX-512
# build beside ours. LLAMA_CPP_LIB_PATH / PYTHONPATH: llama.cpp's library and bindings. Nothing else running.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
python experiments/bench_step_curve.py --native --llama-cpp --repeats 3 --rows 1,2,3,4,6,8,12,16,17,24 \
  --out docs/bench/step-curve-2026-12-07-amd-v26.md
date -u
