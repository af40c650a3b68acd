"""`soarlab compare A B --rerun N` on real pipeline runs (`dvc exp run`, real DVC, MLflow, lm-eval) served
by loopback servers (soarlab.bench.loopback) with a controlled drift between runs: every run's start
(its engine health check) moves the server's per-token delay by the next factor of DRIFT, the same
sequence on every server, as a machine's state drifts between runs. Within one run the repeats see no
drift, so the spread of a run's repeats is far below the spread between runs, as on a real GPU.
"""

from __future__ import annotations

import json
import math
import subprocess

import mlflow
import pytest

from soarlab.bench.loopback import LoopbackServer

from conftest import LOOPBACK_PIPELINE, make_project, run_in

pytestmark = pytest.mark.slow

DELAY_S = 0.01
SLOWDOWN = 1.05  # B's per-token delay: a real slowdown of 5 %
# Base run, then the reruns: between-run spread about 0.8 %, far above each run's repeats'.
DRIFT = (1.0, 1.008, 0.992, 1.0)
COMMON = LOOPBACK_PIPELINE


def _run(cmd: list[str], lab, ok=(0,)) -> subprocess.CompletedProcess:
    return run_in(lab["project"], cmd, ok, timeout=2400)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Runs a, a_twin (identical) and slow (5 % slower per token), compared with reruns while their servers run."""
    lab = {"project": make_project(tmp_path_factory.mktemp("rerun"))}
    with LoopbackServer(token_delay_s=DELAY_S, run_drift=DRIFT) as a, \
            LoopbackServer(token_delay_s=DELAY_S, run_drift=DRIFT) as twin, \
            LoopbackServer(token_delay_s=DELAY_S * SLOWDOWN, run_drift=DRIFT) as slow:
        # slow is also another configuration (one more key), as a slower setting is: its own noise-record group.
        for name, server, extra in (("a", a, []), ("a_twin", twin, []), ("slow", slow, ["-S", "bench.warmup_max_tokens=16"])):
            _run(["dvc", "exp", "run", "-n", name, *COMMON, "-S", f"engine.url={server.base_url}", *extra], lab)
        lab["same"] = _run(["soarlab", "compare", "a", "a_twin", "--rerun", "3", "--json"], lab, ok=(0, 1, 3, 4))
        lab["slower"] = _run(["soarlab", "compare", "a_twin", "slow", "--rerun", "3", "--json"], lab, ok=(0, 1, 3, 4))
        lab["runs_started"] = (a.stats.runs, twin.stats.runs, slow.stats.runs)
    lab["client"] = mlflow.MlflowClient(f"sqlite:///{lab['project'][0] / 'mlflow.db'}")
    return lab


def test_identical_configurations_are_within_noise(lab):
    same = json.loads(lab["same"].stdout)
    assert lab["same"].returncode == 1, lab["same"].stdout
    assert [d["verdict"] for d in same["levels"]] == ["within noise"] * 3
    assert all(d["noise"] == ["reruns", "reruns"] and d["runs"] == [3, 3] for d in same["levels"])


def machine_noise(lab) -> float:
    """The machine's own between-run noise at S1, beside the injected drift: the spread of the identical
    pair's reruns' log mean durations once each is divided by its drift factor."""
    same = json.loads(lab["same"].stdout)
    logs = []
    for ids in (same["a_runs"], same["b_runs"]):
        for i, run_id in enumerate(ids):
            series = lab["client"].get_metric_history(run_id, "bench.S1_repeat_duration_s")
            logs.append(math.log(sum(m.value for m in series) / len(series) / DRIFT[1 + i]))
    mean = sum(logs) / len(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


def test_a_five_percent_slowdown_is_slower(lab):
    # 3 runs a side resolve 5 % only where the runs' own noise is near the injected drift's (~0.8 %).
    noise = machine_noise(lab)
    if noise > 0.012:
        pytest.skip(f"this machine's own run-to-run noise ({noise:.1%} at S1) swamps the injected drift: "
                    "a 5 % slowdown is not resolvable with 3 runs a side here (run it on a quiet machine)")
    slower = json.loads(lab["slower"].stdout)
    verdicts = [d["verdict"] for d in slower["levels"]]
    assert slower["exit_code"] == 3 and verdicts[0] == "slower" and "faster" not in verdicts, lab["slower"].stdout


def test_reruns_are_interleaved_fresh_runs_logged_and_tagged(lab):
    assert lab["runs_started"] == (1 + 3, 1 + 3 + 3, 1 + 3)  # every rerun checked its server anew
    client = lab["client"]
    experiment = client.get_experiment_by_name("soarlab")
    for result in (json.loads(lab["same"].stdout), json.loads(lab["slower"].stdout)):
        runs = [client.get_run(i) for i in result["a_runs"] + result["b_runs"]]
        tags = {r.data.tags["soarlab.compare"] for r in runs}
        assert len(tags) == 1 and tags.pop().startswith("compare-")
        order = sorted(runs, key=lambda r: r.info.start_time)
        assert [r.data.tags["dvc.experiment"][-2:] for r in order] == ["A1", "B1", "A2", "B2", "A3", "B3"]
        assert all(r.data.metrics["bench.S1_valid"] == 1.0 for r in runs)
    assert len(client.search_runs([experiment.experiment_id], max_results=100)) == 3 + 12


def test_the_noise_record_pools_the_reruns(lab):
    """The between-run CV of the record equals the pooled spread of the groups' log run means, read back from MLflow."""
    client = lab["client"]
    experiment = client.get_experiment_by_name("soarlab")
    runs = client.search_runs([experiment.experiment_id], max_results=100)

    def mean_s1(run) -> float:
        series = client.get_metric_history(run.info.run_id, "bench.S1_repeat_duration_s")
        return sum(m.value for m in series) / len(series)

    # Groups of equal inputs: a and its 3 reruns + a_twin and its 6 (engine.url is incidental), slow and its 3.
    groups: dict[str, list[float]] = {}
    for run in runs:
        key = "slow" if run.data.params["engine.url"] == run_url(runs, "slow") else "fast"
        groups.setdefault(key, []).append(math.log(mean_s1(run)))
    squares = sum(sum((x - sum(g) / len(g)) ** 2 for x in g) for g in groups.values())
    df = sum(len(g) - 1 for g in groups.values())
    board = _run(["soarlab", "leaderboard", "--no-plot", "--format", "json"], lab)
    line = next(x for x in board.stderr.splitlines() if x.startswith("noise record of "))
    assert f"S1 {math.sqrt(squares / df):.1%}" in line and "(from 15 runs in 2 groups of equal inputs)" in line


def run_url(runs, name: str) -> str:
    return next(r.data.params["engine.url"] for r in runs if r.data.tags.get("dvc.experiment") == name)
