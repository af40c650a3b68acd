"""A sweep's record in MLflow: one parent run per sweep, one child run per trial.

The pipeline's `track` stage makes each successful trial's child run (it reads the parent's id and
the trial's key from the environment, see tracking.tags.run_tags); a trial that failed before `track`
gets a FAILED child run here, with its reason. The record is also what makes a sweep resumable:
a trial whose key already has a finished child run is not run again. Because it lives in MLflow,
trials on other machines see it through the team's tracking server.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Sequence

from soarlab.domain import LEVELS
from soarlab.names.mlflow_tags import (
    BEST_OVERRIDES_TAG, BEST_RUN_ID_TAG, COMMAND_TAG, FAILURE_TAG, PARENT_TAG, PRUNED_STEP_TAG, PRUNED_TAG, ROLE_TAG,
    SWEEP_TAG, TRIAL_TAG, VARIES_TAG,
)
from soarlab.schema import SoarConfig
from soarlab.tracking.params import override_key
from soarlab.tracking.runs_view import DURATION_METRICS
from soarlab.tracking.store import open_store

_LINE_CHARS = 200


def trial_key(overrides: Sequence[str]) -> str:
    """One name per set of overrides, whatever order they were given in (JSON: values may hold spaces)."""
    return json.dumps(sorted(overrides))


def experiment_name(sweep: str, overrides: Sequence[str]) -> str:
    """The trial's DVC experiment name (what `dvc exp apply` takes): the same on a resume."""
    return f"{sweep}-{hashlib.sha1(trial_key(overrides).encode()).hexdigest()[:8]}"


def varying_keys(space: dict[str, str]) -> list[str]:
    """The keys a sweep's search space varies: those given with Hydra's sweep syntax (`a,b`, `choice(...)`,
    `range(...)`, `interval(...)`, `glob(...)`), not the base every trial shares (`engine=sglang`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()

    def varies(key: str, value: str) -> bool:
        try:
            return parser.parse_override(f"{key}={value}").is_sweep_override()
        except HydraException:  # not an override Hydra parses alone: not a search dimension
            return False

    return sorted({override_key(k) for k, v in space.items() if varies(k, v)})


def trial_label(overrides: Sequence[str], varies: Sequence[str] | None) -> str:
    """What sets a trial apart in its sweep: its overrides of the keys the sweep varies (`varies`; every
    override when unknown), without Hydra's `+`/`~`."""
    shown = [o.lstrip("+~") for o in overrides if varies is None or override_key(o) in varies]
    return " ".join(shown) or "(defaults)"


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(chars - 1, 0)] + "…"


@dataclass
class TrialResult:
    overrides: list[str]
    final: float | None = None
    C: float | None = None
    durations: dict[str, float | None] = field(default_factory=dict)
    failure: str | None = None
    run_id: str | None = None
    pruned: str | None = None  # why the sweep stopped it early; then final is None


    @property
    def objective(self) -> float | None:
        """What a sweeper maximizes: score.final, 0 when the accuracy gate failed (C = 0), None on failure.

        final already multiplies by C; clamping keeps a C = 0 trial from ever outranking a valid one.
        """
        if self.failure is not None or self.pruned is not None or self.final is None:
            return None
        return float(self.final) if self.C else 0.0

    def rank_key(self) -> tuple:
        """Sorts best first: gated trials by final, then C = 0 trials, then pruned ones, then failures."""
        if self.pruned is not None:
            return (2, 0.0)
        if self.objective is None:
            return (3, 0.0)
        return (0 if self.C else 1, -self.objective)

    def line(self, varies: Sequence[str] | None = None) -> str:
        """One line (at most ~200 characters): the trial's label (trial_label), then its result."""
        if self.failure is not None:
            tail = f": FAILED ({self.failure})"
        elif self.pruned is not None:
            tail = f": PRUNED ({self.pruned})"
        else:
            secs = " ".join(f"{lvl}={self.durations.get(lvl) or float('nan'):.2f}s" for lvl in LEVELS)
            tail = f": final={self.final} C={self.C} {secs}"
        head = _cut(trial_label(self.overrides, varies), max(_LINE_CHARS // 2, _LINE_CHARS - len(tail)))
        return _cut(head + tail, _LINE_CHARS)


def summary_table(results: Sequence[TrialResult], varies: Sequence[str] | None = None) -> str:
    """The trials best first, each named by what the sweep varies (trial_label); lines of ~200 characters."""
    head = f"{'#':>3}  {'final':>8}  {'C':>5}  " + "  ".join(f"{lvl:>7}" for lvl in LEVELS) + "  "
    rows = [_cut(head + ("trial: " + ", ".join(varies) if varies else "overrides"), _LINE_CHARS)]
    for i, r in enumerate(sorted(results, key=TrialResult.rank_key), 1):
        label = trial_label(r.overrides, varies)
        if r.failure is not None or r.pruned is not None:
            cells = f"{'FAILED' if r.failure is not None else 'PRUNED':>8}  {'':>5}  " + "  ".join(f"{'':>7}" for _ in LEVELS)
            line = f"{i:>3}  {cells}  {label}  ({r.failure if r.failure is not None else r.pruned})"
        else:
            secs = "  ".join(f"{(r.durations.get(lvl) or math.nan):>7.2f}" for lvl in LEVELS)
            line = f"{i:>3}  {r.final!s:>8}  {r.C!s:>5}  {secs}  {label}"
        rows.append(_cut(line, _LINE_CHARS))
    return "\n".join(rows)


class SweepRecord:
    def __init__(self, cfg: SoarConfig, name: str):
        self.client, self.experiment_id = open_store(cfg)
        self.name = name

    def parent_id(self) -> str | None:
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{SWEEP_TAG}` = '{self.name}' and tags.`{ROLE_TAG}` = 'sweep'",
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def open_parent(self, space: dict[str, str], command: Sequence[str]) -> str:
        """The sweep's parent run, made on the first start and reopened on a resume; tagged with the
        keys the space varies (VARIES_TAG), which name its trials."""
        run_id = self.parent_id()
        if run_id is None:
            run = self.client.create_run(self.experiment_id, run_name=self.name,
                                         tags={SWEEP_TAG: self.name, ROLE_TAG: "sweep"})
            run_id = run.info.run_id
            for key, value in space.items():  # MLflow refuses '+' and '~' in a name (`+engine.server_args.x=...`)
                self.client.log_param(run_id, f"space.{override_key(key)}", str(value)[:6000])
            self.client.set_tag(run_id, COMMAND_TAG, " ".join(command))
            self.client.log_dict(run_id, {"space": space, "command": list(command)}, "sweep/search_space.json")
        else:
            self.client.update_run(run_id, status="RUNNING")
        self.client.set_tag(run_id, VARIES_TAG, json.dumps(varying_keys(space)))
        return run_id

    def varies(self) -> list[str] | None:
        """The keys the sweep varies (VARIES_TAG of its parent run); None when unknown."""
        parent = self.parent_id()
        tag = self.client.get_run(parent).data.tags.get(VARIES_TAG) if parent else None
        return json.loads(tag) if tag is not None else None

    def results(self) -> list[TrialResult]:
        parent = self.parent_id()
        if parent is None:
            return []
        runs = self.client.search_runs([self.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent}'",
                                       order_by=["attributes.start_time ASC"], max_results=5000)
        latest = {}
        for run in runs:
            key = run.data.tags.get(TRIAL_TAG)
            if key is not None and (run.info.status == "FINISHED" or FAILURE_TAG in run.data.tags):
                latest[key] = run
        return [_result(run) for run in latest.values()]

    def finished(self, key: str) -> TrialResult | None:
        return next((r for r in self.results() if trial_key(r.overrides) == key), None)

    def child_run(self, key: str) -> str | None:
        """The newest child run the pipeline logged for this trial (its track stage)."""
        parent = self.parent_id()
        runs = self.client.search_runs([self.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent}'",
                                       order_by=["attributes.start_time DESC"], max_results=5000)
        return next((r.info.run_id for r in runs if r.data.tags.get(TRIAL_TAG) == key), None)

    def record_failure(self, overrides: Sequence[str], reason: str, tags: dict[str, str], logs: Sequence = ()) -> str:
        """Mark the trial failed: on its pipeline run when `track` got that far, else on a new child run;
        `logs` (files) become its artifacts under logs/."""
        key = trial_key(overrides)
        run_id = self.child_run(key)
        if run_id is None:
            parent = self.parent_id()
            run = self.client.create_run(self.experiment_id, run_name=_cut(f"{trial_label(overrides, self.varies())} · failed", _LINE_CHARS), tags={
                PARENT_TAG: parent or "", SWEEP_TAG: self.name, TRIAL_TAG: key})
            run_id = run.info.run_id
            for item in overrides:
                name, _, value = item.lstrip("+~").partition("=")
                self.client.log_param(run_id, name, value)
        for name, value in {**tags, FAILURE_TAG: reason[:5000]}.items():
            self.client.set_tag(run_id, name, value)
        for path in logs:
            self.client.log_artifact(run_id, str(path), "logs")
        self.client.set_terminated(run_id, "FAILED")
        return run_id

    def record_pruned(self, run_id: str, pruned: dict, saved_s: float | None) -> None:
        """Mark the trial's run (made by its track stage) pruned: the reason, the step, its partial figures
        and the estimated evaluate time it saved."""
        self.client.set_tag(run_id, PRUNED_TAG, pruned["reason"][:5000])
        self.client.set_tag(run_id, PRUNED_STEP_TAG, f"{pruned['step']} ({pruned['what']})")
        figures = {"value": pruned["value"], "elapsed_s": pruned["elapsed_s"], **pruned["figures"]}
        for name, value in figures.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.client.log_metric(run_id, f"pruning.{name}", float(value))
        if saved_s is not None:
            self.client.log_metric(run_id, "pruning.saved_s", saved_s)

    def close(self, results: Sequence[TrialResult], varies: Sequence[str] | None) -> TrialResult | None:
        """Put the best gated trial (its overrides in full) and the ranking on the parent run; finish it."""
        parent = self.parent_id()
        if parent is None:
            return None
        ranked = sorted(results, key=TrialResult.rank_key)
        best = ranked[0] if ranked and ranked[0].objective and ranked[0].C else None
        if best is not None:
            self.client.log_metric(parent, "best.final", float(best.final))
            self.client.log_metric(parent, "best.C", float(best.C))
            self.client.set_tag(parent, BEST_OVERRIDES_TAG, " ".join(best.overrides))
            self.client.set_tag(parent, BEST_RUN_ID_TAG, best.run_id or "")
        self.client.log_metric(parent, "trials.finished", sum(r.failure is None for r in results))
        self.client.log_metric(parent, "trials.failed", sum(r.failure is not None for r in results))
        self.client.log_metric(parent, "trials.pruned", sum(r.pruned is not None for r in results))
        self.client.log_text(parent, summary_table(results, varies), "sweep/summary.txt")
        self.client.set_terminated(parent, "FINISHED")
        return best


def _result(run) -> TrialResult:
    metrics, tags = run.data.metrics, run.data.tags
    return TrialResult(
        overrides=json.loads(tags[TRIAL_TAG]),
        final=metrics.get("score.final"),
        C=metrics.get("score.C"),
        durations={lvl: metrics.get(key) for lvl, key in DURATION_METRICS.items()},
        failure=tags.get(FAILURE_TAG),
        run_id=run.info.run_id,
        pruned=tags.get(PRUNED_TAG),
    )
