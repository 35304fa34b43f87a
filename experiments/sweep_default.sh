#!/usr/bin/env bash
# The default sweep (conf/experiment/default.yaml): draft length (levels.ngram.k = 1, 2,
# 4, 8) x temperature (greedy, 0.7) for n-gram > SmolLM2-135M on the first turn of one
# MT-bench question of each of its 8 categories (shipped offline by a package), each job
# also running the autoregressive baseline; then the report.
#
#   experiments/sweep_default.sh                      # results in ./mlflow.db, ./report/
#   experiments/sweep_default.sh max_new_tokens=96    # any overrides
#
# Re-running resumes: finished jobs are skipped. Set TQDM_DISABLE=1 for quiet logs.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python -m stagedspec.run -m experiment=default "$@"
python -m analysis.report experiment=default tracking_uri="sqlite:///$repo/mlflow.db" out="$repo/report"
echo "Report: $repo/report/report.md"
echo "MLflow UI: mlflow ui --backend-store-uri sqlite:///$repo/mlflow.db   (then open http://127.0.0.1:5000)"
