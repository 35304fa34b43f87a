#!/usr/bin/env bash
# The default sweep (conf/experiment/default.yaml, 12 jobs, one per file of conf/point/): the
# staged hierarchy n-gram > Qwen2.5-Coder-0.5B > bypass > Qwen2.5-Coder-1.5B against its two-level
# ablations (0.5B > target, prompt lookup > target) x temperature (greedy, 0.7), its draft-length
# axis (the 0.5B's k) and batch-size axis, on the first HumanEval test problems (shipped offline by
# a package), each job also running the plain autoregressive baseline; then the report (MLflow
# experiment stagedspec-humaneval).
#
#   experiments/sweep_default.sh                      # results in ./mlflow.db, ./report/
#   experiments/sweep_default.sh max_new_tokens=96    # any overrides
#
# Re-running resumes: finished jobs are skipped. Set TQDM_DISABLE=1 for quiet logs.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
t0=$(date +%s)
python -m stagedspec.run -m experiment=default "$@"
t1=$(date +%s)
python -m analysis.report experiment=stagedspec-humaneval tracking_uri="sqlite:///$repo/mlflow.db" out="$repo/report"
t2=$(date +%s)
python -m analysis.timing "$repo/report/timing.json" started="${STAGEDSPEC_STARTED:-$t0}" \
    install_s="${STAGEDSPEC_INSTALL_S:-0}" sweep_s=$((t1 - t0)) report_s=$((t2 - t1))
echo "Report: $repo/report/report.md"
echo "MLflow UI: mlflow ui --backend-store-uri sqlite:///$repo/mlflow.db   (then open http://127.0.0.1:5000)"
