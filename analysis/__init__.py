"""Rebuild a sweep's report from what MLflow holds.

Plain reading and plotting: nothing here imports torch, transformers or the decoding
engine, so a report can be rebuilt on a laptop from the tracking database alone.
``python -m analysis.report experiment=NAME`` is the entry point; see ``report.py``.
"""

from analysis.load import ExperimentNotFound, latest_parent, load_runs

__all__ = ["ExperimentNotFound", "latest_parent", "load_runs"]
