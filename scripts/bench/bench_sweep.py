"""Wall time of a 4-trial `soarlab sweep` against the same 4 pipelines run one after another.

The sweep (quant x serving flag, so two pairs of trials differ only in serving flags) runs in one
fresh project copy; each of the 4 one-after-another pipelines runs `soarlab params OVERRIDES &&
dvc repro` in a fresh copy of its own, as someone would without the sweep. Both count how often
the quantize stage ran. Run from the project root: `python scripts/bench/bench_sweep.py [--full]`
(default: the small trial configuration of tests/sweep/test_sweep.py; --full: the tiny default as is).
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from itertools import product
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from support import make_fresh_project  # noqa: E402  (the tests' project-copy helper: a git repo, no outputs)

QUANTS = ["rtn_w4", "gptq_w4_mixed"]
SERVING = ["engine.log_level=info", "engine.log_level=warning"]
SMALL = ["bench.dataset.num_requests=4", "eval.limit=4", "engine.port=0"]


def run(cmd: list[str], cwd: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true", help="the tiny default as is (300 training steps)")
    fixed = [] if parser.parse_args().full else SMALL
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        dest, env = make_fresh_project(Path(tmp) / "sweep")
        start = time.monotonic()
        out = run(["soarlab", "sweep", "--name", "bench", *fixed, f"quant={','.join(QUANTS)}",
                   f"engine.log_level={','.join(s.split('=')[1] for s in SERVING)}"], dest, env)
        sweep_s = time.monotonic() - start
        sweep_quantizes = sum(p.read_text().count("Running stage 'quantize'")
                              for p in (dest / "sweeps" / "bench").glob("*/trial.log"))
        print(out[out.rindex("[sweep] bench:"):], flush=True)

        one_by_one_s, one_by_one_quantizes = 0.0, 0
        for i, (quant, serving) in enumerate(product(QUANTS, SERVING)):
            dest, env = make_fresh_project(Path(tmp) / f"pipeline-{i}")
            start = time.monotonic()
            run(["soarlab", "params", *fixed, f"quant={quant}", serving], dest, env)
            log = run(["dvc", "repro"], dest, env)
            one_by_one_s += time.monotonic() - start
            one_by_one_quantizes += log.count("Running stage 'quantize'")
            print(f"pipeline {i + 1}/4 quant={quant} {serving}: {time.monotonic() - start:.0f} s", flush=True)

    print(f"\n{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, config: {' '.join(fixed) or 'tiny default'}")
    print("| run | wall s | quantize runs |\n|---|---|---|")
    print(f"| `soarlab sweep` (4 trials) | {sweep_s:.0f} | {sweep_quantizes} |")
    print(f"| 4 pipelines one after another | {one_by_one_s:.0f} | {one_by_one_quantizes} |")
    print(f"| ratio | {one_by_one_s / sweep_s:.2f}x | |")


if __name__ == "__main__":
    main()
