#!/usr/bin/env python3
"""Time `bash scripts/setup.sh` on fresh clones of revisions, alternated, then a second run in the same clone.

    python3 scripts/bench/bench_setup.py --rev HEAD~1 --rev HEAD --runs 2

Each round clones every revision (in the order given) into a temporary folder and times its set-up from
nothing (a new .venv; system packages and pip's cache are the machine's), then the same command again
(what the README's commands pay when run twice). Alternating the revisions spreads the machine's drift
over all of them. Prints one line per set-up and, at the end, a table of the wall and CPU seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import revision  # scripts/bench/: the clone of a revision


def timed_setup(clone: Path, what: str) -> tuple[float, float]:
    """(wall s, CPU s) of `bash scripts/setup.sh` in `clone`."""
    return revision.run_timed(["bash", "scripts/setup.sh"], what, cwd=clone)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", action="append", required=True, help="a revision; give two or more to compare")
    parser.add_argument("--runs", type=int, default=2, help="rounds of fresh set-ups (default 2)")
    args = parser.parse_args()
    results: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for round_ in range(1, args.runs + 1):
        for rev in args.rev:
            with tempfile.TemporaryDirectory(prefix="bench_setup.") as tmp:
                clone = Path(tmp) / "soarlab"
                commit = revision.clone(rev, clone)
                first = timed_setup(clone, f"set-up of {rev}")
                second = timed_setup(clone, f"second set-up of {rev}")
            runs = results.setdefault(f"{rev} ({commit})", {"first": [], "second": []})
            runs["first"].append(first)
            runs["second"].append(second)
            print(f"round {round_}, {rev} ({commit}): fresh {first[0]:.1f} s ({first[1]:.1f} CPU s), "
                  f"again {second[0]:.1f} s", file=sys.stderr, flush=True)
    print("| revision | fresh set-up: wall s (each) | CPU s (mean) | second run: wall s (mean) |")
    print("|---|---|---|---|")
    for name, runs in results.items():
        walls = ", ".join(f"{wall:.1f}" for wall, _ in runs["first"])
        cpu = statistics.mean(c for _, c in runs["first"])
        again = statistics.mean(wall for wall, _ in runs["second"])
        print(f"| {name} | {walls} | {cpu:.1f} | {again:.1f} |")


if __name__ == "__main__":
    main()
