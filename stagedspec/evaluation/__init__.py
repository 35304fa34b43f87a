"""Evaluation: the paired question loop and a job's metrics (``paired``), and the shared
benchmarking code the scripts in ``experiments/`` are thin over."""
