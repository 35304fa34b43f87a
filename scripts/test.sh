#!/usr/bin/env bash
# The project's test command (also what CI runs): install if needed, then pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck disable=SC1091
. scripts/install.sh
export TQDM_DISABLE=1
# the formatter and linter first (pyproject.toml [tool.ruff]): seconds, and a failure names the file
ruff format --check --quiet . || { echo "test: ruff format --check failed: run 'ruff format .'" >&2; exit 1; }
ruff check --quiet .
rc=0
# two workers (pytest-xdist), one per core, each file on one worker (its cached models loaded once):
# the tiny models' tests are Python-bound, so two processes beat one process's two threads
workers="$(python -c 'import os; print(min(2, len(os.sched_getaffinity(0))))')"
python -m pytest -q -n "$workers" --dist loadfile "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
    echo "test: pytest collected no tests (exit 5): treating that as a failure" >&2
    exit 1
fi
exit "$rc"
