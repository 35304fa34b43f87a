"""stagedspec: exact speculative decoding with staged draft hierarchies."""

__version__ = "0.1.0"
