#!/usr/bin/env bash
# The default sweep: draft length (levels.small.k = 2, 4) x temperature (greedy, 0.7) for
# n-gram > truncated SmolLM2 (4 layers) > SmolLM2-135M on one dev prompt per Spec-Bench
# category, each job also running the autoregressive baseline; then the report.
#
#   experiments/sweep_default.sh                      # results in ./mlflow.db, ./report/
#   experiments/sweep_default.sh levels.small.k=1,2,4,8 max_new_tokens=96   # any overrides
#
# Re-running resumes: finished jobs are skipped. Set TQDM_DISABLE=1 for quiet logs.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
python -m stagedspec.run -m experiment=default "$@"
python -m analysis.report experiment=default tracking_uri="sqlite:///$PWD/mlflow.db" out=report
