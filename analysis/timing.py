"""Write how long the main command's parts took, and on which machine, beside its report.

    python -m analysis.timing report/timing.json started=EPOCH_S install_s=S sweep_s=S report_s=S

``scripts/main.sh`` calls it last; the README's main-command figures read the file
(``analysis/readme_results.py``)."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, UTC
from pathlib import Path

from stagedspec.metrics.machine import cpu_label

FIELDS = ("started", "install_s", "sweep_s", "report_s")


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
        "cpu": cpu_label(),
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
