"""The disk cache's one writer: a JSON file replaced atomically, where a failure to write
(a read-only cache) is logged and costs a re-measurement, never correctness. Used by the
kernel calibration (``cache/kernels``) and ``tree=auto``'s calibration (``cache/trees``)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def write_json_atomically(f: Path, data: Any, what: str, shown: Path | None = None) -> None:
    """Write ``data`` to ``f`` through a temporary file and ``os.replace`` (parallel jobs
    never read half a file). ``what`` names the cache in the warning, ``shown`` the path
    it names (default ``f``)."""
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, f)
    except OSError as e:  # a read-only cache costs a re-calibration, not correctness
        log.warning("could not cache the %s in %s: %s", what, f if shown is None else shown, e)
