"""CPU seconds per test and per test file (docs/PERFORMANCE.md, "Test suite"): a pytest plugin, then its table.

    PYTHONPATH=scripts/bench PYTEST_CPU_DIR=/tmp/cpu .venv/bin/pytest -p pytest_cpu    # any pytest arguments
    python scripts/bench/pytest_cpu.py /tmp/cpu [/tmp/cpu-before]                      # per file, side by side

Each worker (pytest-xdist) appends one JSON line per test to PYTEST_CPU_DIR/<worker>.jsonl: its wall
seconds and the CPU seconds of the worker and of the processes it reaped meanwhile (stages, servers,
`dvc`), from getrusage. A module's fixtures count in its first test. Containers run under Podman's
conmon, not as children, and are not counted.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from pathlib import Path

DIR_ENV = "PYTEST_CPU_DIR"


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ != "__main__":  # loaded by pytest; run as a script (the table) it needs no pytest
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        wall, cpu = time.perf_counter(), _cpu_s()
        yield
        folder = Path(os.environ.get(DIR_ENV, "pytest-cpu"))
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a") as out:
            out.write(json.dumps({"test": item.nodeid, "wall_s": time.perf_counter() - wall, "cpu_s": _cpu_s() - cpu}) + "\n")


def per_file(folder: Path) -> dict[str, tuple[float, float]]:
    """{test file: (CPU s, wall s)} summed over its tests."""
    sums: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for log in folder.glob("*.jsonl"):
        for line in log.read_text().splitlines():
            row = json.loads(line)
            sums[row["test"].split("::")[0]][0] += row["cpu_s"]
            sums[row["test"].split("::")[0]][1] += row["wall_s"]
    return {name: (cpu, wall) for name, (cpu, wall) in sums.items()}


def main() -> None:
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    runs = [per_file(Path(arg)) for arg in sys.argv[1:]]
    heads = " | ".join(f"{arg}: CPU s / wall s" for arg in sys.argv[1:])
    print(f"| test file | {heads} |\n|---|{'---|' * len(runs)}")
    for name in sorted(runs[0], key=lambda n: -runs[0][n][0]):
        cells = " | ".join(f"{run[name][0]:.0f} / {run[name][1]:.0f}" if name in run else "–" for run in runs)
        print(f"| {name} | {cells} |")
    totals = " | ".join(f"{sum(c for c, _ in run.values()):.0f} / {sum(w for _, w in run.values()):.0f}" for run in runs)
    print(f"| all | {totals} |")


if __name__ == "__main__":
    main()
