#!/usr/bin/env bash
# The project's main job: install if needed, run the default sweep on the embedded
# SmolLM2-135M (logged to ./mlflow.db), and write the report to ./report/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck disable=SC1091
. scripts/install.sh
bash experiments/sweep_default.sh "$@"
