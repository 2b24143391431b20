"""Summarise ``mutmut results --all true`` (read on stdin): ``killed K of N`` and the mutants that lived.

A mutant counts as killed when a test failed (``killed``) or it ran past mutmut's time limit
(``timeout``: the mutation made the code loop); every other mutant it was given counts against
the score, ``no tests`` included: code no selected test reaches is code no test judges.
Exits 1 when the score is below ``--require`` (95 % unless told).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

KILLED = {"killed", "timeout"}


def main() -> int:
    parser = argparse.ArgumentParser(description="Summarise mutmut's results (read on stdin).")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")
    parser.add_argument("--require", type=float, default=95.0, metavar="PERCENT",
                        help="exit 1 when fewer than this percentage of the mutants are killed (default 95)")
    args = parser.parse_args()
    statuses: dict[str, str] = {}
    for line in sys.stdin:
        name, sep, status = line.strip().rpartition(": ")
        if sep and name:
            statuses[name] = status
    if not statuses:
        print("mutation_report: no mutants in mutmut's results", file=sys.stderr)
        return 1
    counts = Counter(statuses.values())
    killed = sum(counts[s] for s in KILLED)
    lived = sorted(name for name, status in statuses.items() if status not in KILLED)
    score = killed / len(statuses)
    passed = 100 * score >= args.require
    if args.json:
        print(json.dumps({"killed": killed, "mutants": len(statuses), "score": round(score, 4),
                          "required": args.require / 100, "passed": passed,
                          "statuses": dict(counts), "survivors": {n: statuses[n] for n in lived}}))
    else:
        print(f"killed {killed} of {len(statuses)} ({100 * score:.1f} %)")
        for name in lived:
            print(f"  {statuses[name]}: {name}")
        if not passed:
            print(f"below the {args.require:g} % required", file=sys.stderr)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
