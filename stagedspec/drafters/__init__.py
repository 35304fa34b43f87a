"""Draft levels. Every level implements ``Drafter`` (``stagedspec/engine/drafter_protocol.py``)."""

from stagedspec.engine.drafter_protocol import Drafter
from .bypass import BypassDrafter
from .model_drafter import ModelDrafter
from .ngram_drafters import KatzNgramDrafter, PromptLookupDrafter

__all__ = ["BypassDrafter", "Drafter", "KatzNgramDrafter", "ModelDrafter", "PromptLookupDrafter"]
