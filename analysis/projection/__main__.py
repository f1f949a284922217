"""Command line of the projection (analysis.projection.predict): its tables as text for an
aggregate directory.

    python -m analysis.projection --aggregate results/aggregate --devices 4,8,16 \
        [--collectives results/benchmarks/collectives.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.projection import predict
from analysis.projection.text import format_tables


def parse_devices(text: str) -> list:
    """'4,8,16' -> [4, 8, 16]; anything but positive whole numbers is refused by name."""
    out = []
    for part in str(text).split(","):
        try:
            n = int(part.strip())
        except ValueError:
            n = 0
        if n < 1 or part.strip() != str(n):
            raise ValueError(f"--devices {text!r}: {part.strip()!r} is not a positive whole number of devices "
                             "(give e.g. 4,8,16)")
        out.append(n)
    return sorted(set(out))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.projection", description=predict.__doc__.split("\n\n")[0])
    ap.add_argument("--aggregate", default="results/aggregate", help="an aggregate directory (runs.csv, ...)")
    ap.add_argument("--devices", default="4,8,16", help="device counts to project to, comma-separated")
    ap.add_argument("--collectives", default=None,
                    help="benchmarks/collectives.py's JSON (alpha-beta fit); default: the one beside the aggregate "
                    "(../benchmarks/collectives.json) if there is one, else alpha from the measured runs")
    ap.add_argument("--draws", type=int, default=predict.BOOTSTRAP, help="bootstrap draws for the intervals")
    args = ap.parse_args(argv)
    try:
        devices = parse_devices(args.devices)
    except ValueError as exc:
        ap.error(str(exc))
    if args.collectives and not Path(args.collectives).is_file():
        ap.error(f"--collectives {args.collectives!r}: no such file (python -m benchmarks.collectives writes it)")
    if not (Path(args.aggregate) / "runs.csv").is_file():
        ap.error(f"--aggregate {args.aggregate!r}: no runs.csv there (python -m analysis.aggregate writes it)")
    res = predict.project_aggregate(args.aggregate, devices, args.collectives or "auto", args.draws)
    print(format_tables(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
