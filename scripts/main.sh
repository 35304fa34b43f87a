#!/usr/bin/env bash
# The project's main job: install if needed, run the default sweep on the packaged
# Qwen2.5-Coder 1.5B / 0.5B pair (logged to ./mlflow.db), and write the report to ./report/
# (report/timing.json: how long each part took, on which CPU).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
started=$(date +%s)
# shellcheck disable=SC1091
. scripts/install.sh
STAGEDSPEC_STARTED=$started STAGEDSPEC_INSTALL_S=$(($(date +%s) - started)) bash experiments/sweep_default.sh "$@"
