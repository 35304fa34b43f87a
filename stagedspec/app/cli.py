"""What the command line sees: a bad config as one message, and every job of a sweep
checked before the first one starts (before the MLflow database, the parent run or any
model is touched).

Hydra prints a ``CompactHydraException`` as its message alone (no traceback) and
re-raises everything under ``HYDRA_FULL_ERROR=1``; ``CliError`` is one, raised from a
``ConfigError``, so the full traceback is one environment variable away. Any other error
an entry point meets (``entry_errors``) also prints as one line, with the path of a file
holding its full traceback (the job's output directory, else a temporary file).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any
from collections.abc import Iterator

from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException, HydraException
from omegaconf import DictConfig

from .plan import ConfigError, JobPlan, validate_cfg

log = logging.getLogger(__name__)


class CliError(CompactHydraException):
    """A ConfigError as the command line prints it: ``error: <message>``."""


@contextlib.contextmanager
def config_errors(prefix: str = "") -> Iterator[None]:
    """Turn a ConfigError raised inside into a CliError (one line, no traceback)."""
    try:
        yield
    except ConfigError as e:
        raise CliError(f"error: {prefix}{e}") from e


TRACEBACK_FILE = "traceback.txt"
"""The file, in the job's output directory, that holds an unexpected error's traceback."""


def traceback_path() -> Path:
    """Where an unexpected error's traceback goes: ``traceback.txt`` in the Hydra job's
    output directory when there is one, else a new temporary file."""
    if HydraConfig.initialized():
        out = Path(HydraConfig.get().runtime.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        return out / TRACEBACK_FILE
    fd, name = tempfile.mkstemp(prefix="stagedspec-traceback-", suffix=".txt")
    with open(fd, "w"):
        pass
    return Path(name)


def one_line(e: BaseException, limit: int = 300) -> str:
    """An exception as one line: its type and its message's first line (cut at ``limit``)."""
    lines = str(e).strip().splitlines() or [""]
    text = lines[0] + (" ..." if len(lines) > 1 else "")
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


@contextlib.contextmanager
def entry_errors() -> Iterator[None]:
    """An entry point's errors as one line each: a ConfigError as ``error: <message>``;
    any other exception as ``error: <type>: <message> (full traceback: <file>)``, the
    traceback written to that file first. KeyboardInterrupt and SystemExit pass through."""
    try:
        with config_errors():
            yield
    except CliError:
        raise
    except Exception as e:  # noqa: BLE001 - every unexpected error, reported the same way
        path = traceback_path()
        path.write_text("".join(traceback.format_exception(e)), encoding="utf-8")
        raise CliError(f"error: {one_line(e)} (full traceback: {path})") from e


def sweep_points(config: DictConfig) -> list[list[str]] | None:
    """Every job of a multirun as its override list, as Hydra's BasicSweeper will make
    them (the preset's ``hydra.sweeper.params`` and the command line's overrides, the
    product of the comma lists). None for a sweep this cannot enumerate (another sweeper,
    range or interval sweeps): its jobs are then checked one by one as they start."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweeper = config.hydra.sweeper
    if not str(sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None
    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    try:
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        overrides = parser.parse_overrides(params + list(config.hydra.overrides.task))
        (points,) = BasicSweeper.split_arguments(overrides, None)
    except HydraException:
        return None
    return points


def swept_keys(config: DictConfig) -> list[str]:
    """The keys a multirun sweeps (more than one value), in command-line order."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    try:
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        overrides = parser.parse_overrides(params + list(config.hydra.overrides.task))
    except HydraException:
        return []
    return list(dict.fromkeys(o.get_key_element().lstrip("+~") for o in overrides if o.is_sweep_override()))


def validate_sweep(config: DictConfig, **kwargs: Any) -> list[tuple[list[str], JobPlan]] | None:
    """Compose and validate every job of a multirun (``validate_cfg(**kwargs)``: no model loads).
    Raises CliError naming the first bad job; None when the jobs cannot be enumerated."""
    from hydra.core.global_hydra import GlobalHydra

    points = sweep_points(config)
    if points is None:
        return None
    t0 = time.perf_counter()
    loader = GlobalHydra.instance().config_loader()
    swept = set(swept_keys(config))
    plans = []
    for i, point in enumerate(points):
        job_cfg = loader.load_sweep_config(config, list(point))
        label = " ".join(o for o in point if o.split("=", 1)[0].lstrip("+~") in swept) or " ".join(point)
        where = f"job {i} of {len(points)} ({label}): " if len(points) > 1 else ""
        with config_errors(where):
            plans.append((list(point), validate_cfg(job_cfg, **kwargs)))
    log.info("checked the configs of all %d jobs in %.1f s", len(points), time.perf_counter() - t0)
    return plans


def validate_single(config: DictConfig, **kwargs: Any) -> JobPlan:
    with config_errors():
        return validate_cfg(config, **kwargs)
