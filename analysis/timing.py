"""Write how long the main command's parts took, and on which machine, beside its report.

    python -m analysis.timing report/timing.json started=EPOCH_S install_s=S sweep_s=S report_s=S

``scripts/main.sh`` calls it last; the README's main-command figures read the file
(``analysis/readme_results.py``)."""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import datetime, UTC
from pathlib import Path

FIELDS = ("started", "install_s", "sweep_s", "report_s")


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``) and the vector extensions that pick kernels."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.processor() or platform.machine()
    name = next(
        (line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
        platform.machine(),
    )
    flags = next((set(line.split(":", 1)[1].split()) for line in info.splitlines() if line.startswith("flags")), set())
    ext = [
        label
        for flag, label in (
            ("avx512_bf16", "AVX-512 BF16"),
            ("avx512_vnni", "VNNI"),
            ("amx_tile", "AMX"),
            ("avx2", "AVX2"),
        )
        if flag in flags
    ]
    return f"{name} ({', '.join(ext)})" if ext else name


def timing(values: dict[str, str]) -> dict:
    missing = [f for f in FIELDS if f not in values]
    if missing:
        raise SystemExit(f"analysis.timing: missing {', '.join(missing)} (need {' '.join(f + '=' for f in FIELDS)})")
    started = int(values["started"])
    parts = {k: int(values[k]) for k in FIELDS[1:]}
    return {
        "started": datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%d %H:%M UTC"),
        **parts,
        "total_s": sum(parts.values()),
        "cpu": cpu_name(),
        "threads": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or "=" in argv[0]:
        raise SystemExit(__doc__.split("\n\n")[1].strip())
    values = dict(a.split("=", 1) for a in argv[1:])
    record = timing(values)
    Path(argv[0]).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"main command: {record['total_s'] / 60:.1f} min on {record['cpu']} -> {argv[0]}")


if __name__ == "__main__":
    main()
