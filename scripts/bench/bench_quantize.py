"""Time every quantization preset on the tiny model (CPU). Never run inside a timed test.

    python scripts/bench/bench_quantize.py [--presets gptq_w4,gptq_w4_mixed,...] [--repeats 3] [--output FILE]

Builds the tiny model (untrained: the timing does not depend on the weights' values), runs one
untimed warm-up (GPTQModel JIT-compiles its CPU packing extension on first use), then each preset
`--repeats` times through soarlab.quant.quantize.quantize_checkpoint, and prints the median
quantize / report / total seconds, sizes and the mean relative output error per preset.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", default="gptq_w4,gptq_w4_mixed,gptq_w8,rtn_w4,none")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", help="also write the results as JSON here")
    args = parser.parse_args()

    os.chdir(ROOT)
    from soarlab.config import compose
    from soarlab.quant.quantize import quantize_checkpoint
    from soarlab.tiny import install_tiny_model

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = install_tiny_model(Path(tmp) / "base")
        quantize_checkpoint(base, Path(tmp) / "warmup", compose(["quant=gptq_w4"]).quant, model_name="tiny")
        for preset in args.presets.split(","):
            runs = []
            for i in range(args.repeats):
                report = quantize_checkpoint(base, Path(tmp) / f"{preset}-{i}", compose([f"quant={preset}"]).quant,
                                             model_name="tiny")
                runs.append(report["metrics"])
            med = {k: statistics.median(r[k] for r in runs) for k in ("quantize_seconds", "report_seconds", "total_seconds")}
            results[preset] = {**med, "size_before_bytes": runs[0]["size_before_bytes"],
                               "size_after_bytes": runs[0]["size_after_bytes"],
                               "rel_output_error_mean": runs[0].get("rel_output_error_mean")}
    meta = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.processor() or platform.machine()}, "
            f"{len(os.sched_getaffinity(0))} usable CPU cores, no GPU", "python": sys.version.split()[0],
            "repeats": args.repeats, "command": " ".join([Path(sys.executable).name, *sys.argv])}
    print(json.dumps(meta))
    print(f"{'preset':15} {'quantize s':>10} {'report s':>9} {'total s':>8} {'size before':>12} {'size after':>11} {'rel out err':>11}")
    for preset, r in results.items():
        err = f"{r['rel_output_error_mean']:.4f}" if r["rel_output_error_mean"] is not None else "-"
        print(f"{preset:15} {r['quantize_seconds']:10.2f} {r['report_seconds']:9.2f} {r['total_seconds']:8.2f} "
              f"{r['size_before_bytes']:12d} {r['size_after_bytes']:11d} {err:>11}")
    if args.output:
        Path(args.output).write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
