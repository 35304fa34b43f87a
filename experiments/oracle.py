"""The router against the best fixed routing in hindsight, per prompt, from a peers run
(``stagedspec/evaluation/bench_oracle.py``).

    python experiments/oracle.py docs/peers/v10-amd-humaneval-t0/measurements.jsonl \
        --router "ngram:1:30>q4:12:50:2>route:24" \
        --fixed "ngram:1:30>q4:12:50:2>copy:24:6,copy:16:3,q4:12:50:2" --out docs/peers/v10-amd-humaneval-t0/oracle.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from stagedspec.evaluation.bench_oracle import markdown, oracle_table


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measurements", help="a peers run's measurements.jsonl")
    ap.add_argument("--router", required=True, help="the routed method's name as in the file")
    ap.add_argument("--fixed", required=True, help="comma-separated fixed routings (method names as in the file)")
    ap.add_argument("--out", default=None, help="also write the markdown here")
    args = ap.parse_args(argv)
    records = [json.loads(line) for line in Path(args.measurements).read_text().splitlines() if line.strip()]
    fixed = [m for m in args.fixed.split(",") if m]
    rows, summary = oracle_table(records, args.router, fixed)
    text = markdown(rows, summary, args.router, fixed)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
