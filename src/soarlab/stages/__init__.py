"""Pipeline stages. Each module has `run(cfg)`: read inputs named by config, write files into
models/, data/ or reports/ (atomically). Tracking reads those files afterwards; stages never log."""

from __future__ import annotations

import importlib

from soarlab.config import load_params


def run_stage_cli(args) -> int:
    module = importlib.import_module(f"soarlab.stages.{args.name.replace('-', '_')}")
    module.run(load_params(args.params))
    return 0
