"""`python -m dlbench.campaigns compare A B`, `... history A B C ...`, `... published CSV DIR`,
`... manifest ROOT`. A and B: campaign directories or pipeline working
directories. (A committed campaign regenerates with `python -m dlbench.report regenerate`.)

compare exits 1 when a cell is confidently slower beyond the tolerance (for CI), 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlbench.campaigns import campaign, compare, history, published


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dlbench.campaigns", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    c = commands.add_parser("compare", help="candidate B against reference A")
    c.add_argument("reference")
    c.add_argument("candidate")
    c.add_argument("--tolerance", type=float, default=0.05, help="relative band counted as the same (0.05: ±5%%)")
    c.add_argument("--min-repeats", type=int, default=3)
    c.add_argument("--out", help="directory for comparison.json and comparison.csv")
    h = commands.add_parser("history", help="change points per cell across three or more campaigns")
    h.add_argument("campaigns", nargs="+")
    h.add_argument("--out", required=True, help="directory for changes.csv, changes.json and history.png")
    p = commands.add_parser("published", help="write one campaign directory per published source")
    p.add_argument("csv")
    p.add_argument("out")
    m = commands.add_parser("manifest", help="write results/campaign.json of a pipeline working directory")
    m.add_argument("root")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "compare":
        result = compare.compare(
            campaign.load(args.reference), campaign.load(args.candidate), args.tolerance, args.min_repeats
        )
        if args.out:
            compare.write(result, args.out)
        print(compare.text(result))
        return 1 if result.comparable and len(result.regressions) else 0
    if args.command == "history":
        found = history.detect([campaign.load(p) for p in args.campaigns])
        history.write(found, Path(args.out))
        print(history.text(found))
        return 0
    if args.command == "published":
        for c in published.import_published(args.csv):
            print(campaign.save(c, Path(args.out) / c.id))
        return 0
    print(campaign.write_pipeline_manifest(args.root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
