"""Evaluation: the paired question loop and a job's metrics (``paired``), and the shared
benchmarking code the scripts in ``experiments/`` are thin over: their options, target and
prompts (``bench_setup``), the methods they time (``bench_methods``), the interleaved,
resumable measurement log (``bench_log``), the tables with intervals (``bench_table``) and
the machine probes (``bench_machine``)."""
