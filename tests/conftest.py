"""Shared fixtures. The embedded model is loaded once per session through the default
cache ($STAGEDSPEC_CACHE or ~/.cache/stagedspec), so only the first run on a machine pays
the ~20 s GGUF dequantization."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):  # scripts/test.sh: one worker per core, one thread each
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))

from stagedspec.models.model_loading import LoadedModel, ModelSpec, load_model


@pytest.fixture(scope="session")
def embedded_model() -> LoadedModel:
    return load_model(ModelSpec(source="embedded", dtype="float32", device="cpu"))


@pytest.fixture
def tiny_model() -> LoadedModel:
    """A random 4-layer Llama: a forward takes well under a millisecond."""
    return load_model(ModelSpec(source="tiny", tiny={"num_hidden_layers": 4}, seed=0))
