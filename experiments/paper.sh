#!/usr/bin/env bash
# The paper-scale sweep (conf/experiment/paper.yaml: 28 jobs, 47 minutes on 2 cores) and its
# report, written to docs/paper/<date>/ (report.md, figures, runs.csv, timing.json): the framework's
# reference figures. Nothing else should run beside it. Re-running resumes (finished jobs skipped).
#   bash experiments/paper.sh [DATE]      # MLflow database: ./mlflow.db, experiment stagedspec-paper
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# shellcheck disable=SC1091
. scripts/install.sh
export TQDM_DISABLE=1
out="docs/paper/${1:-$(date -u +%Y-%m-%d)}"
t0=$(date +%s)
python -m stagedspec.run -m experiment=paper
t1=$(date +%s)
python -m analysis.report experiment=stagedspec-paper tracking_uri="sqlite:///$repo/mlflow.db" out="$repo/$out"
t2=$(date +%s)
python -m analysis.timing "$out/timing.json" started="$t0" install_s=0 sweep_s=$((t1 - t0)) report_s=$((t2 - t1))
echo "Report: $repo/$out/report.md"
