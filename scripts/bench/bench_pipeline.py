"""Time each stage of the pipeline on the committed params.yaml, one after the other, in this checkout.

    . .venv/bin/activate && python scripts/bench/bench_pipeline.py     # prints a markdown table

Runs the stages directly (DVC would skip unchanged ones), so it overwrites models/, data/ and
reports/ as `dvc repro --force` would, and logs one more MLflow run. Stage logs go to /tmp.
"""

from __future__ import annotations

import subprocess
import sys
import time

STAGES = ("check-params", "inputs", "fetch-model", "fetch-data", "quantize", "package", "evaluate", "reference", "score", "track")


def main() -> int:
    print("| stage | wall s |\n|---|---|")
    total = 0.0
    for stage in STAGES:
        start = time.perf_counter()
        with open(f"/tmp/soarlab-bench-{stage}.log", "w") as log:
            subprocess.run(["soarlab", "stage", stage], stdout=log, stderr=subprocess.STDOUT, check=True)
        seconds = time.perf_counter() - start
        total += seconds
        print(f"| {stage} | {seconds:.1f} |", flush=True)
    print(f"| **total** | {total:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
