"""leaderboard, compare, record-submission, calibration, gate and what the MLflow UI reads, on real
MLflow runs made by the real pipeline (`dvc exp run` on the tiny default: real DVC, GPTQModel, lm-eval).

The pipeline's engine is `engine=external`, pointed at loopback servers (soarlab.bench.loopback)
started here: two identical ones at FAST_S per token (runs fast1, fast2) and two at SLOW_S (runs slow,
slow2, with one more config change; each server its own, so that DVC measures each run anew). Equal
configurations are the noise record's two groups. They have no chat endpoint, so every correctness
request fails and scores 0 (local C = 0, with a settled interval [0, 0]); the accuracy offset of a
recorded submission is what puts predictions in the C = 1 band. The `soarlab` commands under test run
through the CLI's entry point in this process (support.soarlab_in); the pipeline runs are processes.
"""

from __future__ import annotations

import json
import math
import subprocess

import mlflow
import pytest
import yaml

from soarlab.bench.loopback import LoopbackServer
from soarlab.datasets.soar import file_sha256
from soarlab.tracking import runs_view

from support import LOOPBACK_PIPELINE, make_project, run_in, soarlab_in

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

FAST_S, SLOW_S = 0.01, 0.03
COMMON = LOOPBACK_PIPELINE  # bench.repeats is the tiny default's 3


def _run(cmd: list[str], lab, ok=(0,)) -> subprocess.CompletedProcess:
    return run_in(lab["project"], cmd, ok)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Four pipeline runs (fast1, fast2 identical; slow, slow2 identical, with one more config change) and a no-op `dvc repro`."""
    lab = {"project": make_project(tmp_path_factory.mktemp("decide"))}
    dest = lab["project"][0]
    with LoopbackServer(token_delay_s=FAST_S) as fast1, LoopbackServer(token_delay_s=FAST_S) as fast2, \
            LoopbackServer(token_delay_s=SLOW_S) as slow, LoopbackServer(token_delay_s=SLOW_S) as slow2:
        for name, server, extra in (("fast1", fast1, []), ("fast2", fast2, []),
                                    ("slow", slow, ["-S", "bench.warmup_max_tokens=16"]),
                                    ("slow2", slow2, ["-S", "bench.warmup_max_tokens=16"])):
            _run(["dvc", "exp", "run", "-n", name, *COMMON, "-S", f"engine.url={server.base_url}", *extra], lab)
        lab["noop"] = _run(["dvc", "repro"], lab).stdout
    client = mlflow.MlflowClient(f"sqlite:///{dest / 'mlflow.db'}")
    # Settled (the first no-op re-ran track for the run slow2 had just written), then a write to the store.
    lab["settled"] = _run(["dvc", "repro"], lab).stdout
    probe = client.search_runs([client.get_experiment_by_name("soarlab").experiment_id], max_results=1)[0]
    client.set_tag(probe.info.run_id, "soarlab.test_probe", "a write to the store")
    lab["after_write"] = _run(["dvc", "repro"], lab).stdout
    experiment = client.get_experiment_by_name("soarlab")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    lab.update(client=client, experiment=experiment, runs={r.data.tags["dvc.experiment"]: r for r in runs}, count=len(runs))
    return lab


def test_a_settled_no_op_repro_runs_only_inputs_until_the_store_changes(lab):
    """reference and track read the MLflow store: they re-run when its stamp (reports/inputs/store.json)
    changed, and a no-op `dvc repro` on an unchanged store runs the inputs stage alone."""
    ran = lambda out: {stage for stage in ("inputs", "reference", "track", "score") if f"Running stage '{stage}'" in out}  # noqa: E731
    assert ran(lab["settled"]) == {"inputs"}, lab["settled"]
    assert ran(lab["after_write"]) == {"inputs", "reference", "track"}, lab["after_write"]
    assert "no new run logged" in lab["after_write"]


def _soarlab(args: list[str], lab, ok=(0,)) -> subprocess.CompletedProcess:
    return soarlab_in(lab["project"], args, ok)


def _json(args, lab, ok=(0,)):
    return json.loads(_soarlab(args, lab, ok).stdout)


def test_mlflow_reads_what_the_ui_shows(lab):
    dest = lab["project"][0]
    client, runs = lab["client"], lab["runs"]
    assert lab["experiment"].tags["mlflow.experimentKind"] == "custom_model_development"
    assert runs_view.is_current(lab["experiment"].tags[runs_view.VIEW_TAG])  # the runs table's score columns
    assert lab["count"] == 4 and "no new run logged" in lab["noop"]  # the no-op `dvc repro` added no run
    fast, slow = runs["fast1"], runs["slow"]
    # The name leads with the configuration, then its scores (the runs table hides metric columns outside its score view).
    assert fast.data.tags["soarlab.config_name"] == "none · engine=external, bench.pause_after_flush_s=0, eval.retries=0"
    assert slow.data.tags["soarlab.config_name"].endswith("bench.pause_after_flush_s=0, bench.warmup_max_tokens=16, eval.retries=0")
    for run in (fast, slow):
        m = run.data.metrics
        assert run.info.run_name.startswith("none · engine=external") and len(run.info.run_name) <= 120
        assert run.info.run_name.endswith(f" · final {m['score.final']:.2f} · C {m['score.C']:g} · ori {m['accuracy.ori_accuracy']:.1f}"
                                          f" · S1 {m['bench.S1_duration_s']:.2f}s S8 {m['bench.S8_duration_s']:.2f}s"
                                          f" Smax {m['bench.Smax_duration_s']:.2f}s"), run.info.run_name
    assert fast.data.tags["git.dirty"] == "False"
    # The run spans the pipeline: it starts when its first stage started (check-params for the first run).
    first_stage = json.loads((dest / "reports" / "logs" / "stages.jsonl").read_text().splitlines()[0])
    assert first_stage["stage"] == "check-params" and fast.info.start_time == int(1000 * first_stage["start"])
    assert fast.info.end_time > fast.info.start_time + 1000 * (first_stage["end"] - first_stage["start"])
    inputs = {i.tags[0].value: i.dataset for i in slow.inputs.dataset_inputs}
    assert inputs["speed"].digest == file_sha256(dest / "data" / "speed.jsonl")[:32]
    assert inputs["correctness"].digest == file_sha256(dest / "data" / "correctness.jsonl")[:32]
    assert json.loads(inputs["speed"].profile)["sha256"] == file_sha256(dest / "data" / "speed.jsonl")
    lock = yaml.safe_load((dest / "dvc.lock").read_text())
    md5 = next(o["md5"] for o in lock["stages"]["quantize"]["outs"] if o["path"] == "models/quantized")
    model_id = slow.outputs.model_outputs[0].model_id
    model = client.get_logged_model(model_id)
    assert model.source_run_id == slow.info.run_id and model.tags["soarlab.dvc_md5"] == md5
    pointer = mlflow.artifacts.download_artifacts(f"{model.artifact_location}/checkpoint.dvc-pointer.yaml")
    assert yaml.safe_load(open(pointer))["dvc_md5"] == md5
    assert [a.path for a in client.list_artifacts(slow.info.run_id) if a.path == "dvc.lock"]
    assert "dvc exp apply slow" in slow.data.tags["mlflow.note.content"]
    series = client.get_metric_history(slow.info.run_id, "bench.S8_repeat_duration_s")
    assert [m.step for m in series] == [0, 1, 2]
    assert len(client.get_metric_history(slow.info.run_id, "bench.S1_request_latency_s")) == 3 * 12


def test_compare_slower_and_within_noise(lab):
    """fast1 and fast2 have the same inputs (engine.url is incidental), as have slow and slow2: together they
    are the machine's noise record, so a difference is judged against the spread between runs, not repeats."""
    slower = _soarlab(["compare", "fast1", "slow"], lab, ok=(3,))
    assert slower.stdout.count("-> slower") == 3 and "C settled in the same band (0.0)" in slower.stdout
    assert "(from 4 runs in 2 groups of equal inputs)" in slower.stdout and "noise: noise record" in slower.stdout
    same = _json(["compare", "fast1", "fast2", "--json"], lab, ok=(1,))
    assert [d["verdict"] for d in same["levels"]] == ["within noise"] * 3
    assert all(d["noise"] == ["noise record", "noise record"] for d in same["levels"])
    faster = _json(["compare", "slow", lab["runs"]["fast2"].info.run_id, "--json"], lab, ok=(0,))
    assert [d["verdict"] for d in faster["levels"]] == ["faster"] * 3
    bad = _soarlab(["compare", "fast1", "no-such-run"], lab, ok=(2,))
    assert "no run 'no-such-run'" in bad.stderr
    once = _soarlab(["compare", "fast1", "slow", "--rerun", "1"], lab, ok=(2,))
    assert "--rerun 1 gives no spread between runs" in once.stderr and "Fix:" in once.stderr


def test_noise_record_from_the_recorded_runs(lab):
    """The record's CV per level pools the spread of each identical pair's log mean durations, read back from MLflow."""
    client = lab["client"]
    board = _soarlab(["leaderboard", "--no-plot", "--format", "json"], lab)
    line = next(x for x in board.stderr.splitlines() if x.startswith("noise record of "))
    def log_mean(name: str, level: str) -> float:
        series = client.get_metric_history(lab["runs"][name].info.run_id, f"bench.{level}_repeat_duration_s")
        return math.log(sum(m.value for m in series) / len(series))

    for level in ("S1", "S8", "Smax"):
        # A pair's sum of squares about its mean is d^2 / 2; one df per pair.
        squares = [(log_mean(a, level) - log_mean(b, level)) ** 2 / 2 for a, b in (("fast1", "fast2"), ("slow", "slow2"))]
        assert f"{level} {math.sqrt(sum(squares) / 2):.1%}" in line
    assert "(from 4 runs in 2 groups of equal inputs)" in line
    gate = _soarlab(["gate", "fast2", "--against", "fast1"], lab, ok=(1,))
    assert "noise record of " in gate.stdout


def test_leaderboard_order_and_config_difference(lab, tmp_path):
    rows = _json(["leaderboard", "--format", "json", "--plot", str(tmp_path / "p.png")], lab)
    assert [r["run"].startswith("none · engine=external") for r in rows] == [True] * 4
    slow = {lab["runs"][name].info.run_id for name in ("slow", "slow2")}
    assert {r["run_id"] for r in rows[2:]} == slow  # slowest last (all at C = 0: ordered by speed)
    assert rows[0]["differs_from_best"] == rows[1]["differs_from_best"] == ""  # engine.url is incidental
    assert rows[2]["differs_from_best"] == rows[3]["differs_from_best"] == "bench.warmup_max_tokens=16"
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    client, experiment = lab["client"], lab["experiment"]
    assert not client.search_runs([experiment.experiment_id], filter_string="tags.`soarlab.kind` = 'leaderboard'")
    own = client.get_experiment_by_name(f"{experiment.name}-leaderboard")  # not a row among the pipeline's runs
    board = client.search_runs([own.experiment_id], filter_string="tags.`soarlab.kind` = 'leaderboard'")
    assert [a.path for a in client.list_artifacts(board[0].info.run_id, "leaderboard")] == ["leaderboard/p.png"]
    table = _soarlab(["leaderboard", "--no-plot", "--format", "markdown"], lab).stdout
    assert table.splitlines()[1].startswith("|--") and "bench.warmup_max_tokens=16" in table
    assert _soarlab(["leaderboard", "--no-plot", "--format", "csv"], lab).stdout.startswith("rank,run,run_id,experiment,final")
    assert _json(["leaderboard", "--no-plot", "--format", "json", "--model", "minicpm_sala"], lab) == []
    sha = lab["runs"]["slow"].data.tags["soarlab.speed_set_sha"][:10]
    assert len(_json(["leaderboard", "--no-plot", "--format", "json", "--speed-set", sha], lab)) == 4


def test_pareto_plot_merges_identical_configs_and_labels_never_overlap(lab, tmp_path):
    import dataclasses

    from soarlab.config import compose
    from soarlab.prediction.calibration import fit
    from soarlab.decide.leaderboard import pareto_plot, rows
    from soarlab.tracking.runs import load_runs

    dest = lab["project"][0]
    cfg = compose([f"tracking.uri=sqlite:///{dest / 'mlflow.db'}"], root=dest)
    runs = load_runs(cfg)[2]
    calibration = fit(runs, cfg)
    found, _ = pareto_plot(rows(runs, calibration, cfg), runs, cfg, calibration.noise, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert [p.runs for p in found] == [2, 2]  # fast1 and fast2 are one configuration, slow and slow2 another
    merged = max(found, key=lambda p: p.performance)
    assert merged.label.endswith(" ×2") and merged.on_front  # the faster configuration at the same accuracy
    # Labelled by what differs from the best run (the slow pair's warm-up length), never by DVC's experiment names.
    assert merged.label == "#1 best ×2"
    assert min(found, key=lambda p: p.performance).label == "#3 bench.warmup_max_tokens=16 ×2"
    assert merged.perf_low < merged.performance < merged.perf_high  # the noise record's spread
    assert merged.ori == lab["client"].get_run(lab["runs"]["fast1"].info.run_id).data.metrics["accuracy.ori_accuracy"]
    # Crowded: each run as 5 configurations (one key changed; the pairs still merge), ten labels at two points.
    crowd = [dataclasses.replace(r, run_id=f"{r.run_id[:-2]}{i:02d}", config={**r.config, "bench.seed": str(i)})
             for r in runs for i in range(5)]
    found, boxes = pareto_plot(rows(crowd, fit(crowd, cfg), cfg), crowd, cfg, {}, tmp_path / "crowd.png")
    assert len(found) == len(boxes) == 10
    overlapping = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
                   if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]]
    assert overlapping == []


def test_record_submission_rejects_missing_and_nonsense_figures(lab):
    for args, says in ((["--S1", "10", "--S8", "10", "--accuracy", "80"], "missing --Smax"),
                       (["--S1", "-5", "--S8", "10", "--Smax", "10", "--accuracy", "80"], "--S1 -5.0 is not a duration"),
                       (["--S1", "5", "--S8", "10", "--Smax", "10", "--accuracy", "180"], "not a raw accuracy"),
                       (["--S1", "5", "--S8", "10", "--Smax", "10", "--accuracy", "80", "--final", "500"], "outside 0..100")):
        proc = _soarlab(["record-submission", "slow", *args], lab, ok=(2,))
        assert proc.stderr.startswith("soarlab: error: ") and says in proc.stderr and "Fix:" in proc.stderr


def _local(lab, name, level):
    return lab["client"].get_run(lab["runs"][name].info.run_id).data.metrics[f"bench.{level}_duration_s"]


# Official per-level ratios chosen to be inverted as in RULES.md 3 (S8, Smax far heavier officially).
RATIOS_1 = {"S1": 5.0, "S8": 26.0, "Smax": 78.0}
RATIOS_2 = {"S1": 20.0, "S8": 104.0, "Smax": 312.0}  # with RATIOS_1: geometric means 10, 52, 156


def _best_overrides(lab):
    """The official leader: twice as fast as the first submission at each level."""
    return [f"decide.calibration.official_best.{L}={_local(lab, 'slow', L) * RATIOS_1[L] / 2}" for L in RATIOS_1]


def test_record_submission_round_trips_and_predictions_follow_the_ratio(lab):
    figures = {L: _local(lab, "slow", L) * RATIOS_1[L] for L in RATIOS_1}
    proc = _soarlab(["record-submission", "slow", "--S1", repr(figures["S1"]), "--S8", repr(figures["S8"]),
                     "--Smax", repr(figures["Smax"]), "--accuracy", "75", "--final", "50", "--note", "first try",
                     *_best_overrides(lab)], lab)
    assert "S8 takes" in proc.stderr and "Smax takes" in proc.stderr and "inverted" in proc.stderr
    assert "S1 takes" not in proc.stderr and "bench.dataset.profile" in proc.stderr
    client = lab["client"]
    slow = client.get_run(lab["runs"]["slow"].info.run_id)
    assert slow.data.tags["soarlab.submitted"] == "true" and slow.data.tags["soarlab.submission.note"] == "first try"
    assert slow.data.metrics["official.S8_duration_s"] == pytest.approx(figures["S8"], rel=1e-12)
    assert slow.data.metrics["official.ori_accuracy"] == 75 and slow.data.metrics["official.final"] == 50
    fast = client.get_run(lab["runs"]["fast1"].info.run_id).data.metrics
    for level, ratio in RATIOS_1.items():  # predicted = local x (official / local of the submitted run)
        assert fast[f"predicted.{level}_duration_s"] == pytest.approx(fast[f"bench.{level}_duration_s"] * ratio, rel=1e-9)
        assert fast[f"predicted.{level}_duration_s_low"] < fast[f"predicted.{level}_duration_s"] < fast[f"predicted.{level}_duration_s_high"]
    # 0 locally + offset 75 - 0, above the tiny model's baseline: C = 1
    assert fast["predicted.ori_accuracy"] == 75 and fast["predicted.C"] == 1.0
    board = _json(["leaderboard", "--no-plot", "--format", "json", *_best_overrides(lab)], lab)
    assert all(r["predicted_final_low"] <= r["predicted_final"] <= r["predicted_final_high"] for r in board)
    assert next(r for r in board if r["run_id"] == slow.info.run_id)["submitted"] == 50.0


def test_gate_exit_codes(lab):
    best = _best_overrides(lab)
    passed = _soarlab(["gate", "fast1", "--against", "submitted", *best], lab, ok=(0,))
    assert "PASS" in passed.stdout and "the official figures of" in passed.stdout
    assert "FAIL" in _soarlab(["gate", "fast1", "--against", "submitted", "--min-gain", "1000", *best], lab, ok=(1,)).stdout
    assert "FAIL" in _soarlab(["gate", "fast2", "--against", "fast1", *best], lab, ok=(1,)).stdout  # within noise
    assert "same run" in _soarlab(["gate", "slow", *best], lab, ok=(2,)).stderr


def test_two_submissions_fit_the_geometric_mean_ratio(lab):
    from soarlab.config import compose
    from soarlab.prediction.calibration import fit
    from soarlab.tracking.runs import load_runs

    figures = {L: _local(lab, "fast2", L) * RATIOS_2[L] for L in RATIOS_2}
    _soarlab(["record-submission", "fast2", *[x for L in RATIOS_2 for x in (f"--{L}", repr(figures[L]))],
              "--accuracy", "85"], lab)
    dest = lab["project"][0]
    cfg = compose([f"tracking.uri=sqlite:///{dest / 'mlflow.db'}"], root=dest)
    calibration = fit(load_runs(cfg)[2], cfg)
    assert calibration.submissions == 2
    assert {L: round(f.ratio, 9) for L, f in calibration.levels.items()} == {"S1": 10.0, "S8": 52.0, "Smax": 156.0}
    assert calibration.offset == pytest.approx(80.0)  # mean of 75 - 0 and 85 - 0
    low, high = calibration.levels["S1"].interval  # log ratios ln 5, ln 20: mean ln 10, se ln 2 (sd ln4/sqrt2, n 2)
    assert math.log(high / 10.0) == pytest.approx(12.7062047 * math.log(2), rel=1e-6)  # t(0.975, 1 df) = 12.706
    assert low == pytest.approx(100.0 / high)
