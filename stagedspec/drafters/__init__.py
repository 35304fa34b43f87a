"""Draft levels. Every level implements ``Drafter`` (see ``base.py``)."""

from .base import Drafter
from .model import ModelDrafter
from .ngram import KatzNgramDrafter, PromptLookupDrafter

__all__ = ["Drafter", "KatzNgramDrafter", "ModelDrafter", "PromptLookupDrafter"]
