"""Metrics (the lowest room, standard library and numpy only): per-round and per-sequence
statistics with the metric definitions (``round_stats``), the schema of a run (metric
tags, the method format: ``run_schema``), 95% intervals (``intervals``), the CPU note beside
a figure (``machine``) and the cost model's predictions (``cost_model``). The engine records
into it, and ``analysis/`` may read it without importing the engine."""
