"""CPU seconds by kind of process while a command runs: which programs a test suite or a pipeline run
spends its CPU in (docs/PERFORMANCE.md, "Where the suite's CPU goes").

    python scripts/bench/cpu_by_command.py -- .venv/bin/pytest
    python scripts/bench/cpu_by_command.py --top 15 -- dvc exp run -S quant=none

Samples /proc every 0.1 s and keeps, per process, the last user + system time seen before it exits; a
process that starts and ends between two samples is missed (such a process is cheap). A process that
was running before the command counts only what it used after the command started. Kinds: `soarlab
stage X`, `soarlab CMD`, `dvc CMD`, the CPU model server, the pytest workers, else the program's name.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
KINDS = [  # (pattern over the command line, kind); the first that matches names it
    (r"soarlab(?:\.cli)? stage (\S+)", "soarlab stage {}"),
    (r"soarlab\.engines\.transformers_serve", "transformers serve (CPU model server)"),
    (r"(?:bin/soarlab|soarlab\.cli) (\S+)", "soarlab {}"),
    (r"(?:bin/dvc|-m dvc)(?: --\S+)* (exp run|exp \S+|\S+)", "dvc {}"),
    (r"huey_consumer", "MLflow server job runner"),
    (r"mlflow server|mlflow\.server|uvicorn", "MLflow server"),
    (r"exec\(eval\(sys\.stdin|xdist|pytest", "pytest (the tests' own process)"),
    (r"-m ?pip (\S+)", "pip {}"),
]


def kind(cmdline: str) -> str:
    for pattern, name in KINDS:
        match = re.search(pattern, cmdline)
        if match:
            return name.format(*match.groups())
    if cmdline.startswith("["):  # a kernel thread, named by cpu_of
        return cmdline
    return Path(cmdline.split(" ", 1)[0]).name or "?"


def cpu_of(pid: str) -> tuple[str, int, str] | None:
    """(start time, CPU ticks, command line) of a process, or None once it is gone. Without a command line
    (a kernel thread, or a process that has exited and awaits its parent), its name in brackets."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return fields[19], int(fields[11]) + int(fields[12]), cmdline or f"[{stat[stat.index('(') + 1:stat.rindex(')')]}]"


def sample(stop: threading.Event, seen: dict, before: dict) -> None:
    while not stop.is_set():
        for pid in filter(str.isdigit, os.listdir("/proc")):
            found = cpu_of(pid)
            if found is None:
                continue
            start, ticks, cmdline = found
            key = (pid, start)  # an exec keeps the process: its last command line names it
            if cmdline.startswith("[") and key in seen:  # exited: keep the command line it had
                cmdline = seen[key][0]
            seen[key] = (cmdline, ticks - before.get(key, 0))
        stop.wait(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=25, help="kinds to list (the rest are summed)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given. Fix: put it after --, e.g. -- .venv/bin/pytest")
    before = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        found = cpu_of(pid)
        if found:
            before[(pid, found[0])] = found[1]
    seen: dict = {}
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(stop, seen, before), daemon=True)
    sampler.start()
    t0 = time.monotonic()
    code = subprocess.call(command)
    wall = time.monotonic() - t0
    stop.set()
    sampler.join()
    by_kind: dict[str, list[float]] = defaultdict(list)
    for (pid, _), (cmdline, ticks) in seen.items():
        if ticks > 0 and pid != str(os.getpid()):
            by_kind[kind(cmdline)].append(ticks / TICK)
    ranked = sorted(by_kind.items(), key=lambda item: -sum(item[1]))
    total = sum(sum(cpu) for _, cpu in ranked)
    print(f"\n`{' '.join(command)}`: exit {code}, {wall:.0f} s wall, {total:.0f} CPU s in the processes seen\n")
    print("| kind of process | processes | CPU s | CPU s each |\n|---|---|---|---|")
    for name, cpu in ranked[:args.top]:
        print(f"| {name} | {len(cpu)} | {sum(cpu):.1f} | {sum(cpu) / len(cpu):.2f} |")
    rest = [c for _, cpu in ranked[args.top:] for c in cpu]
    if rest:
        print(f"| (the other {len(ranked) - args.top} kinds) | {len(rest)} | {sum(rest):.1f} | |")
    return code


if __name__ == "__main__":
    sys.exit(main())
