"""The adapters: Hydra entry points (``run``, ``generate``), the config -> plan
translation (``plan``), run identity (``identity``) and the one MLflow writer with its
Hydra callback (``tracking``). The only part of stagedspec that imports Hydra, omegaconf
or MLflow; everything outside this folder is a plain library."""

from .resolvers import register as _register_resolvers

_register_resolvers()
