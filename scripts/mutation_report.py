"""Summarise ``mutmut results --all true`` (read on stdin): ``killed K of N`` and the mutants that lived.

A mutant counts as killed when a test failed (``killed``) or it ran past mutmut's time limit
(``timeout``: the mutation made the code loop); every other mutant it was given counts against
the score, ``no tests`` included: code no selected test reaches is code no test judges.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

KILLED = {"killed", "timeout"}


def main() -> int:
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
    if "--json" in sys.argv[1:]:
        print(json.dumps({"killed": killed, "mutants": len(statuses), "score": round(score, 4),
                          "statuses": dict(counts), "survivors": {n: statuses[n] for n in lived}}))
    else:
        print(f"killed {killed} of {len(statuses)} ({100 * score:.1f} %)")
        for name in lived:
            print(f"  {statuses[name]}: {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
