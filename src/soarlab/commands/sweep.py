"""sweep: Hydra's command line, handed over as it is (soarlab.sweep.app)."""

from __future__ import annotations

import argparse


def add_parsers(sub) -> None:
    p = sub.add_parser("sweep", help="sweep the pipeline with Hydra multirun (each trial a DVC experiment)",
                       description="Hydra's command line: e.g. soarlab sweep quant=gptq_w4,gptq_w8 "
                                   "hydra/sweeper=optuna hydra/launcher=ray_gpu; --name NAME to name/resume it")
    p.add_argument("hydra_args", nargs=argparse.REMAINDER, help="Hydra overrides and options")
    p.set_defaults(run=sweep_cli)


def sweep_cli(args) -> int:
    """`soarlab sweep ARGS`: ARGS go to Hydra untouched (soarlab.cli hands them over before argparse sees them)."""
    from soarlab.sweep.app import run_sweep

    return run_sweep(args.hydra_args)
