#!/usr/bin/env bash
# The target's step T(n) on the 2-core AMD EPYC (Zen 4: AVX-512 VNNI and BF16, no AMX) of v29, full forwards
# (decoder and head), llama.cpp's AVX-512 build interleaved with ours repeat by repeat. Before the rows loop's
# scale-group lanes (at 71b4cd6, 5 repeats), after it (1b5508e, 5 repeats), then after with 15 repeats at 1, 4 and
# 16 rows (the plain step against llama.cpp's). LLAMA_CPP_LIB_PATH / PYTHONPATH: llama.cpp's library and bindings.
# Nothing else running.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
export TQDM_DISABLE=1
lscpu | grep "Model name"; date -u
if [ "${1:-}" = before ]; then
  python experiments/bench_step_curve.py --native --llama-cpp --repeats 5 --rows 1,2,4,8,12,16,24 \
    --out docs/bench/step-curve-2026-12-08-amd-v29.md
elif [ "${1:-}" = after ]; then
  python experiments/bench_step_curve.py --native --llama-cpp --repeats 5 --rows 1,2,4,8,12,16,24 \
    --out docs/bench/step-curve-2026-12-08-amd-v29-rows.md
else
  python experiments/bench_step_curve.py --native --llama-cpp --repeats 15 --rows 1,4,16 \
    --out docs/bench/step-curve-2026-12-08-amd-v29-rows-15.md
fi
date -u
