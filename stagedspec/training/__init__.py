"""Training drafts for a target: the corpus of the target's own answers and the
distillation of the feature and layers designs (``python -m stagedspec.distill``)."""
