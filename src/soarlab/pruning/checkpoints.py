"""The evaluate stage's half of pruning: report intermediate results, obey the trial's decisions.

Outside a pruning sweep (no PRUNE_ENV) every method is a no-op and nothing ever waits.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from soarlab.names.environment import PRUNE_ENV, TRIAL_LOGS_ENV
from soarlab.pruning import ACCURACY, END, REPORTS, S1, Pruned, decision_path

_POLL_S = 0.5


class Checkpoints:
    def __init__(self, folder: Path | None, settings: dict):
        self.folder, self.settings = folder, settings
        self.started = time.monotonic()
        self.pending: dict[int, tuple[str, dict]] = {}  # reported steps not yet decided
        self.s1_first_send: float | None = None
        self.s1_done = 0

    @classmethod
    def from_env(cls) -> "Checkpoints":
        raw, logs = os.environ.get(PRUNE_ENV), os.environ.get(TRIAL_LOGS_ENV)
        return cls(Path(logs), json.loads(raw)) if raw and logs else cls(None, {})

    @property
    def active(self) -> bool:
        return self.folder is not None

    def _append(self, entry: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with (self.folder / REPORTS).open("a") as out:  # one short line: the trial reads whole lines only
            out.write(json.dumps({**entry, "elapsed_s": round(time.monotonic() - self.started, 3)}) + "\n")

    def report(self, step: int, what: str, value: float, figures: dict) -> None:
        if self.active:
            self._append({"step": step, "what": what, "value": value, "figures": figures})
            self.pending[step] = (what, figures)

    def check(self, step: int, wait: bool) -> None:
        """Raise Pruned when the trial decided so for `step`; `wait`: up to decision_timeout_s for it."""
        if step not in self.pending:
            return
        path = decision_path(self.folder, step)
        deadline = time.monotonic() + (float(self.settings["decision_timeout_s"]) if wait else 0.0)
        while not path.is_file() and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        if not path.is_file():
            if wait:  # the trial process did not answer: go on rather than lose the trial
                print(f"evaluate: no pruning decision for step {step} in {self.settings['decision_timeout_s']} s; going on")
                del self.pending[step]
            return
        decision = json.loads(path.read_text())
        what, figures = self.pending.pop(step)
        if decision["prune"]:
            raise Pruned(step, what, decision["reason"], figures)

    def accuracy(self, summary: dict) -> None:
        """Report C of the whole correctness set (the trial's final C, not an estimate) and wait for the
        decision: the bench levels are the costly part. The bootstrap bounds go along as figures."""
        boot = summary.get("bootstrap") or {}
        figures = {k: summary[k] for k in ("ori_accuracy", "normalized_accuracy", "C", "n")}
        figures.update({k: boot[k] for k in ("ori_low", "ori_high", "C_low", "C_high") if k in boot})
        self.report(ACCURACY, "accuracy: C", float(summary["C"]), figures)
        self.check(ACCURACY, wait=True)

    def on_request(self, level: str, repeat: int, total: int, record) -> None:
        """Called as each timed request of the bench ends: report S1 after its first part, then apply the decision."""
        if not self.active or level != "S1":
            return
        if S1 in self.pending:
            self.check(S1, wait=False)
            return
        if repeat != 0:
            return
        self.s1_done += 1
        self.s1_first_send = record.send if self.s1_first_send is None else min(self.s1_first_send, record.send)
        if self.s1_done == max(1, math.ceil(float(self.settings["s1_fraction"]) * total)):
            elapsed = (record.end or record.send) - self.s1_first_send
            self.report(S1, "S1: requests per second over its first requests", self.s1_done / elapsed,
                        {"requests": self.s1_done, "of": total, "elapsed_s": round(elapsed, 4)})

    def after_level(self, level: str) -> None:
        if level == "S1":
            self.check(S1, wait=True)

    def end(self) -> None:
        if self.active:
            self._append({"step": END})
