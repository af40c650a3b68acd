"""The lab of the `soarlab compare A B --rerun N` tests: real pipeline runs (`dvc exp run`, real DVC, MLflow,
lm-eval) served by loopback servers (soarlab.bench.loopback) with a controlled drift between runs: every
run's start (its engine health check) moves the server's per-token delay by the next factor of DRIFT, the
same sequence on every server, as a machine's state drifts between runs. One timed run per level: the
reruns, not a run's repeats, are the spread `compare --rerun` judges by.

The two comparisons (identical configurations; a 5 % slowdown) are two labs in two test files, so that
xdist runs them side by side.
"""

from __future__ import annotations

import math
import subprocess

import mlflow

from soarlab.bench.loopback import LoopbackServer

from support import LOOPBACK_PIPELINE, make_project, run_in

DELAY_S = 0.01
# Base run, then the reruns: between-run spread about 0.8 %, far above the machine's own.
DRIFT = (1.0, 1.008, 0.992, 1.0)
RERUNS = 3
COMMON = [*LOOPBACK_PIPELINE, "-S", "bench.repeats=1"]


def run(lab: dict, cmd: list[str], ok=(0,)) -> subprocess.CompletedProcess:
    return run_in(lab["project"], cmd, ok, timeout=2400)


def compare_lab(dest, b_delay_s: float, b_extra: list[str]) -> dict:
    """Runs a and b on their own loopback servers (b at `b_delay_s` per token, with `b_extra` overrides),
    then `soarlab compare a b --rerun RERUNS --json` while the servers run."""
    lab = {"project": make_project(dest)}
    with LoopbackServer(token_delay_s=DELAY_S, run_drift=DRIFT) as a, \
            LoopbackServer(token_delay_s=b_delay_s, run_drift=DRIFT) as b:
        for name, server, extra in (("a", a, []), ("b", b, b_extra)):
            run(lab, ["dvc", "exp", "run", "-n", name, *COMMON, "-S", f"engine.url={server.base_url}", *extra])
        lab["compare"] = run(lab, ["soarlab", "compare", "a", "b", "--rerun", str(RERUNS), "--json"], ok=(0, 1, 3, 4))
        lab["runs_started"] = (a.stats.runs, b.stats.runs)
    lab["client"] = mlflow.MlflowClient(f"sqlite:///{dest / 'mlflow.db'}")
    return lab


def mean_s1(client, run_id: str) -> float:
    series = client.get_metric_history(run_id, "bench.S1_repeat_duration_s")
    return sum(m.value for m in series) / len(series)


def machine_noise(lab: dict, result: dict) -> float:
    """The machine's own between-run noise at S1, beside the injected drift: the pooled spread of each
    side's reruns' log mean durations once each is divided by its drift factor."""
    squares, df = 0.0, 0
    for ids in (result["a_runs"], result["b_runs"]):
        logs = [math.log(mean_s1(lab["client"], run_id) / DRIFT[1 + i]) for i, run_id in enumerate(ids)]
        squares += sum((x - sum(logs) / len(logs)) ** 2 for x in logs)
        df += len(logs) - 1
    return math.sqrt(squares / df)


def assert_interleaved_fresh_runs_logged_and_tagged(lab: dict, result: dict) -> None:
    assert lab["runs_started"] == (1 + RERUNS, 1 + RERUNS)  # every rerun checked its server anew
    client = lab["client"]
    runs = [client.get_run(i) for i in result["a_runs"] + result["b_runs"]]
    tags = {r.data.tags["soarlab.compare"] for r in runs}
    assert len(tags) == 1 and tags.pop().startswith("compare-")
    order = sorted(runs, key=lambda r: r.info.start_time)
    assert [r.data.tags["dvc.experiment"][-2:] for r in order] == ["A1", "B1", "A2", "B2", "A3", "B3"]
    assert all(r.data.metrics["bench.S1_valid"] == 1.0 for r in runs)
    experiment = client.get_experiment_by_name("soarlab")
    assert len(client.search_runs([experiment.experiment_id], max_results=100)) == 2 + 2 * RERUNS
