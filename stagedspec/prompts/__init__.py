"""Prompts: the prompt sets a run is measured on (MT-bench, HumanEval from packages,
Spec-Bench files: ``prompt_sets``) and the templated training prompts the drafts learn
from (``training_prompts``). Standard library only."""
