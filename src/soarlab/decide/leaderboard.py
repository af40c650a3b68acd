"""`soarlab leaderboard`: the runs of an MLflow experiment ranked by score, and a Pareto plot.

Each row: final (the local score against the fastest run on the same model and speed set), C and
the ori interval, each level's duration with its spread over repeats, the predicted official final
with its interval once a submission is recorded (ranked by it then), and the config keys that
differ from the best run. Below it, each machine's noise record (soarlab.prediction.noise): the between-run
CV per level and the number of runs behind it. The Pareto plot (soarlab.decide.pareto: performance
against raw accuracy over the C bands) is written as a PNG and logged to MLflow beside the pipeline's
runs, never among them (log_plot).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from soarlab.prediction.calibration import Calibration, fit, predict
from soarlab.decide.length_flag import flag as length_flag
from soarlab.schema import SoarConfig
from soarlab.tracking.params import config_delta
from soarlab.tracking.runs import RunRecord
from soarlab.domain import LEVELS
from soarlab.names.mlflow_tags import DVC_EXPERIMENT_TAG, KIND_TAG, NOTE_TAG, ROLE_TAG, SWEEP_TAG

_NAME_CHARS = 48  # run names in the table; JSON and CSV keep them whole


def _row(run: RunRecord, local, official, long_answers: str | None) -> dict:
    row = {"run": run.name, "run_id": run.run_id, "experiment": run.tags.get(DVC_EXPERIMENT_TAG, ""), "final": local.final[0] if local else None,
           "performance": local.performance if local else None,
           "normalized_accuracy": local.normalized_accuracy if local else None,
           "C": local.C[0] if local else run.metrics.get("accuracy.C"),
           "ori": run.ori, "ori_low": None, "ori_high": None}
    if run.ori_interval:
        row["ori_low"], row["ori_high"] = run.ori_interval
    for level in LEVELS:
        row[f"{level}_s"] = run.duration(level)
        row[f"{level}_spread_s"] = run.metrics.get(f"bench.{level}_spread_s")
        row[f"{level}_speed"] = local.speeds[level][0] if local else None
        row[f"{level}_accept_length"] = run.metrics.get(f"bench.{level}_spec_accept_length")
    row["answers_changed_by_spec"] = run.metrics.get("lossless.answers_differ")
    row["length_p95"], row["long_answers"] = run.metrics.get("accuracy.length_p95"), long_answers
    if official:
        row.update({"predicted_final": official.final[0], "predicted_final_low": official.final[1],
                    "predicted_final_high": official.final[2], "predicted_C": official.C[0]})
        row.update({f"predicted_{L}_s": official.durations[L][0] for L in LEVELS})
    row["submitted"] = run.official("final") if run.official("final") is not None else ("yes" if run.submitted else "")
    return row


def rows(runs: list[RunRecord], calibration: Calibration, cfg: SoarConfig) -> list[dict]:
    """One dict per run, best first: local figures, predictions, config difference from the best."""
    local = fit(runs, cfg, use_submissions=False)
    calibrated = calibration.submissions > 0
    table = [(_row(run, predict(local, run, cfg.score), predict(calibration, run, cfg.score) if calibrated else None,
                   length_flag(run, runs, cfg.decide.lengths)), run) for run in runs]
    key = "predicted_final" if calibrated else "final"
    # Equal finals (e.g. all at C = 0) are ordered by speed.
    table.sort(key=lambda pair: (pair[0].get(key) is None, -(pair[0].get(key) or 0.0), -(pair[0]["performance"] or 0.0)))
    for row, run in table:
        row["differs_from_best"] = ", ".join(config_delta(run.config, table[0][1].config, cfg.decide.incidental_params))
    return [dict(rank=i + 1, **row) for i, (row, _) in enumerate(table)]


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _display(row: dict) -> dict:
    """The columns people read: intervals and spreads folded into one cell each."""
    name = row["run"] if len(row["run"]) <= _NAME_CHARS else row["run"][: _NAME_CHARS - 1] + "…"
    out = {"#": row["rank"], "DVC exp": row["experiment"] or "-", "run": name, "id": row["run_id"][:8], "final": _cell(row["final"]), "C": _cell(row["C"]),
           "ori [interval]": f"{_cell(row['ori'])} [{_cell(row['ori_low'])}, {_cell(row['ori_high'])}]"}
    for level in LEVELS:
        spread = f" ±{row[f'{level}_spread_s'] / 2:.2f}" if row.get(f"{level}_spread_s") is not None else ""
        out[f"{level} s"] = _cell(row[f"{level}_s"]) + spread
    if "predicted_final" in row:
        out["official final (pred.)"] = f"{_cell(row['predicted_final'])} [{_cell(row['predicted_final_low'])}, {_cell(row['predicted_final_high'])}]"
    accepts = [row[f"{level}_accept_length"] for level in LEVELS]
    if any(a is not None for a in accepts) or row["answers_changed_by_spec"] is not None:
        out["spec accept " + "/".join(LEVELS)] = "/".join(_cell(a) for a in accepts)
        out["answers changed"] = _cell(row["answers_changed_by_spec"])
    if row["length_p95"] is not None:
        out["answer p95"] = _cell(row["length_p95"]) + (" LONG" if row["long_answers"] else "")
    out["submitted"] = _cell(row["submitted"])
    out["differs from best"] = row["differs_from_best"] or ("(best)" if row["rank"] == 1 else "(same config)")
    return out


def render(table: list[dict], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(table, indent=2)
    if fmt == "csv":
        buffer = io.StringIO()
        columns = list(dict.fromkeys(k for row in table for k in row))
        writer = csv.DictWriter(buffer, columns)
        writer.writeheader()
        writer.writerows(table)
        return buffer.getvalue()
    from tabulate import tabulate

    shown = [_display(row) for row in table]
    return tabulate(shown, headers="keys", tablefmt="github" if fmt == "markdown" else "simple")


def pareto_plot(table: list[dict], runs: list[RunRecord], cfg: SoarConfig, noise, target: Path) -> tuple[list, list] | None:
    """The Pareto plot (soarlab.decide.pareto) written to `target`: (its points, its label boxes), or
    None without a run to plot."""
    from soarlab.decide.pareto import draw, points

    found = points(table, runs, cfg, noise)
    if not found:
        return None
    baseline = next(r for r in runs if r.run_id == table[0]["run_id"]).baseline
    return found, draw(found, target, cfg.score, baseline)


def log_plot(client, experiment: str, sweep: str | None, plot: Path) -> str:
    """Log the plot where it is not one more row among the pipeline's runs: with `--sweep`, to that
    sweep's parent run; else to the one `leaderboard` run of the experiment `<experiment>-leaderboard`."""
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    parents = client.search_runs([experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'sweep'", max_results=1000)
    run_id = next((r.info.run_id for r in parents if sweep in (r.info.run_id, r.data.tags.get(SWEEP_TAG))), None) if sweep else None
    if run_id is None:
        own = client.get_experiment_by_name(f"{experiment}-leaderboard")
        own_id = own.experiment_id if own else client.create_experiment(  # its artifacts where the pipeline's go
            f"{experiment}-leaderboard", artifact_location=client.get_experiment(experiment_id).artifact_location)
        found = client.search_runs([own_id], filter_string=f"tags.`{KIND_TAG}` = 'leaderboard'", max_results=1)
        run_id = found[0].info.run_id if found else client.create_run(own_id, run_name="leaderboard", tags={
            KIND_TAG: "leaderboard", NOTE_TAG: f"The latest `soarlab leaderboard` Pareto plot of {experiment}."}).info.run_id
        client.set_terminated(run_id, "FINISHED")
    client.log_artifact(run_id, str(plot), artifact_path="leaderboard")
    return run_id
