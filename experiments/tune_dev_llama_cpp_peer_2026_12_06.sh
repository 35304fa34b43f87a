#!/usr/bin/env bash
# llama.cpp's own prompt lookup at its best on the dev split (2026-12-06, nothing else running):
# ngram-simple's lookup n-gram size N and draft size M (defaults 12 and 48) and ngram-mod, on the
# HumanEval dev problems of tune_dev_2026_12_06.sh (3, 30, 57, 84, 111, 138), 64 tokens, T = 0.
# LLAMA_BIN: llama.cpp's build/bin (docs/llama-cpp.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. .venv/bin/activate
lscpu | grep "Model name"; date -u
python experiments/llama_cpp_peer.py --bin "$LLAMA_BIN" --split dev --first-prompt 1 --stride 9 --prompts 6 \
  --modes ngram-simple,ngram-simple:3:16,ngram-simple:4:24,ngram-simple:6:48,ngram-simple:12:16,ngram-mod \
  --max-new-tokens 64 --json docs/tuning/dev-llama-cpp-peer-humaneval-t0.json
date -u
