"""OmegaConf resolvers the configs use, registered when ``stagedspec.app`` is imported (before
Hydra composes anything).

``${cpu_else:DEVICE,ON_CPU,ELSEWHERE}``: ON_CPU when DEVICE is ``cpu`` (or ``cpu:N``), else
ELSEWHERE. The packaged pair's CPU-only settings take it on their own model's device, so
``device=cuda`` alone gives a configuration that runs there: the target's GGUF-native kernel
becomes its dense weights (``target.device=cuda`` too) and the 0.5B's re-encoded 4-bit blocks its dense weights (``conf/target/qwen_coder_1p5b.yaml``, ``conf/drafter/qwen_coder_0p5b.yaml``).
"""

from __future__ import annotations

from omegaconf import OmegaConf


def cpu_else(device, on_cpu, elsewhere):
    return on_cpu if str(device).split(":")[0] == "cpu" else elsewhere


def register() -> None:
    OmegaConf.register_new_resolver("cpu_else", cpu_else, replace=True)
