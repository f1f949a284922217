"""Command line of the HTML report (analysis.report.render): render the report of an aggregate
directory.

    python -m analysis.report --aggregate results/aggregate --out results/report/index.html \
        [--assets results/report]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.aggregate import Aggregate
from analysis.projection import predict
from analysis.report import render


def main(argv=None) -> int:
    """Command line: render the report of an aggregate directory."""
    p = argparse.ArgumentParser(prog="python -m analysis.report", description=render.__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--aggregate", required=True, help="directory written by analysis.aggregate")
    p.add_argument("--out", required=True, help="the HTML page to write (e.g. results/report/index.html)")
    p.add_argument("--assets", default=None, help="directory for table CSV/HTML and plot PNG files "
                   "(default: the page's directory)")
    args = p.parse_args(argv)
    agg_dir = Path(args.aggregate)
    if not (agg_dir / "runs.csv").exists():
        p.error(f"--aggregate {agg_dir}: no runs.csv there; run `python -m analysis.aggregate --out-dir "
                f"{agg_dir} RUN_DIR...` first")
    out = Path(args.out)
    # the all-reduce micro-benchmark where it writes by default, beside the aggregate, if there is one
    page = render.render(Aggregate.load(agg_dir), out, Path(args.assets) if args.assets else out.parent,
                         source=str(agg_dir), collectives=predict.default_collectives(agg_dir))
    print(f"[analysis] report: {page} ({page.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
