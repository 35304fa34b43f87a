"""Draft levels. Every level implements ``Drafter`` (see ``base.py``)."""

from .base import Drafter
from .bypass import BypassDrafter
from .model import ModelDrafter
from .ngram import KatzNgramDrafter, PromptLookupDrafter

__all__ = ["BypassDrafter", "Drafter", "KatzNgramDrafter", "ModelDrafter", "PromptLookupDrafter"]
