"""Rebuild a sweep's report from what MLflow holds.

Plain reading and plotting: nothing here imports torch, transformers or the decoding
engine, so a report can be rebuilt on a laptop from the tracking database alone.
``python -m analysis.report experiment=NAME`` is the entry point; see ``report.py``.
"""

__all__ = ["ExperimentNotFound", "latest_parent", "load_runs"]


def __getattr__(name: str):
    # Loaded on first use: importing analysis (or one of its light modules) must not pull
    # in pandas and MLflow.
    if name in __all__:
        from . import load

        return getattr(load, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
