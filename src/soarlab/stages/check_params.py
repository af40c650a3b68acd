"""check-params: the first stage DVC runs whenever params.yaml changed (dvc.yaml says why).

The check itself is the stage runner's (soarlab.stages.run_stage validates params.yaml against
soarlab.schema before any stage runs); what is left here is the output other stages depend on, so
that DVC orders this stage first. It is the same for every valid config: nothing after it re-runs
because of it.
"""

from __future__ import annotations

from soarlab.atomic import write_json
from soarlab.paths import project_root
from soarlab.schema import SoarConfig


def run(cfg: SoarConfig) -> None:
    write_json(project_root() / cfg.paths.reports / "check-params.json", {"valid": True})
