"""`python -m dlbench.report regenerate CAMPAIGN [--out DIR]`: a committed campaign's tables,
manifest and report made again from its raw logs (dlbench.report.regenerate). Without --out it
checks the committed files byte for byte and exits 1 naming each one that differs."""

from __future__ import annotations

import argparse
import sys

from dlbench.report import regenerate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlbench.report", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    r = commands.add_parser("regenerate", help="a committed campaign's tables and report from its raw logs")
    r.add_argument("campaign", help="a campaign directory with config/*.yaml and results/runs/ (campaigns/)")
    r.add_argument("--out", help="write them here; without it, check the committed ones byte for byte")
    args = parser.parse_args(argv)
    if args.out:
        for path in regenerate.regenerate_campaign(args.campaign, args.out).values():
            print(path)
        return 0
    differences = regenerate.check_campaign(args.campaign)
    for line in differences:
        print(line, file=sys.stderr)
    verdict = "differs" if differences else "byte-identical to its regeneration from the raw logs"
    print(f"{args.campaign}: {verdict}")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
