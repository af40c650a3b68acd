"""Measure the CPU serving image: cold base + build, cached rebuild, image size, start-to-healthy.

    . .venv/bin/activate && python scripts/bench/bench_image.py [--keep]

Runs in the project (needs models/base: `dvc repro fetch-model`), under image tags of its own, which
it removes first (a clean state) and at the end (unless --keep). Prints one JSON object; the numbers
go to docs/PERFORMANCE.md with the machine and date.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE, TAG = "localhost/soarlab-bench-base:1", "localhost/soarlab-bench-cpu:1"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", action="store_true", help="keep the measured images")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from soarlab.container import container_tool

    cli = container_tool("auto")
    for tag in (TAG, BASE):
        cli.run(["rmi", "-f", tag], timeout=300)
    params = ROOT / "reports" / "bench-image-params.yaml"
    overrides = ["engine.launcher=container", "engine.port=0", f"package.cpu_image.base={BASE}",
                 f"package.cpu_image.tag={TAG}"]
    soarlab = [sys.executable, "-m", "soarlab.cli"]
    subprocess.run([*soarlab, "params", *overrides, "--output", str(params)], check=True, cwd=ROOT)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.processor() or platform.machine(),
              "cpus": os.cpu_count(), "engine": cli.name, "load_before": os.getloadavg()[0]}
    start = time.monotonic()
    subprocess.run([*soarlab, "base-image", *overrides], check=True, cwd=ROOT)
    result["base_image_s"] = round(time.monotonic() - start, 1)
    for run in ("cold", "cached"):
        subprocess.run([*soarlab, "stage", "package", "--params", str(params)], check=True, cwd=ROOT)
        metrics = json.loads((ROOT / "reports" / "package" / "metrics.json").read_text())
        result[f"{run}_build_s"] = metrics["build_s"]
        result[f"{run}_start_to_healthy_s"] = metrics["start_to_healthy_s"]
        result["image_bytes"] = metrics["image_bytes"]
    result["load_after"] = os.getloadavg()[0]
    if not args.keep:
        for tag in (TAG, BASE):
            cli.run(["rmi", "-f", tag], timeout=300)
    params.unlink()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
