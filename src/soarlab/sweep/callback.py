"""The sweep's start and end, wherever its trials run: the MLflow parent run and the summary table."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from soarlab.names.environment import SWEEP_ENV
from soarlab.sweep.record import SweepRecord, experiment_name, summary_table, trial_label
from soarlab.sweep.spec_gains import spec_gains_table
from soarlab.tracking.store import tracking_uri


def sweep_name(config: DictConfig) -> str:
    return str(config.hydra.job.env_set[SWEEP_ENV])


class SweepProgress(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        name = sweep_name(config)
        params = OmegaConf.to_container(config.hydra.sweeper, resolve=True).get("params") or {}
        command = list(config.hydra.overrides.task)
        space = {**{k: str(v) for k, v in params.items()}, **dict(o.split("=", 1) for o in command if "=" in o)}
        run_id = SweepRecord(config, name).open_parent(space, command)
        print(f"[sweep] {name}: parent MLflow run {run_id} in {tracking_uri(config)}; "
              "run the same command again to resume it", flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        record = SweepRecord(config, sweep_name(config))
        results, varies = record.results(), record.varies()
        best = record.close(results, varies)
        print(f"[sweep] {record.name}: {len(results)} trials, best first\n{summary_table(results, varies)}", flush=True)
        gains = spec_gains_table(results, dict(config.score.weights))
        if gains:
            print(f"[sweep] speculative decoding against spec=none, duration saved per level (+: faster):\n{gains}",
                  flush=True)
        if best is None:
            print("[sweep] no trial passed the accuracy gate (C > 0); nothing to apply", flush=True)
        else:
            print(f"[sweep] best: {trial_label(best.overrides, varies)} (final {best.final}); apply it with: "
                  f"dvc exp apply {experiment_name(record.name, best.overrides)}", flush=True)
