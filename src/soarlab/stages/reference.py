"""reference: the best durations (`duration_best` of RULES.md 1) the score is measured against, from
`score.reference.source` (soarlab.tracking.durations says what each source means).

Its source, the MLflow store, is state DVC cannot see: the stage re-runs whenever the store's stamp
changed (dvc.yaml lists reports/inputs/store.json), and `score` then reads only files. While a local
store is unchanged, its last answer is reused without loading MLflow (soarlab.tracking.memo); `track`
answers it for the store it has just written (and `soarlab sweep` after it tags a trial's run), so the
next run's reference does not load MLflow either; nor does the first run's, before a local store exists.
Writes reports/reference.json: {source, durations: {level: seconds | null}, runs}.
"""

from __future__ import annotations

from soarlab.atomic import write_json
from soarlab.datasets.soar import file_sha256
from soarlab.paths import REFERENCE_FILE, SPEED_SET_FILE, project_root
from soarlab.schema import SoarConfig
from soarlab.tracking.durations import remembered_reference
from soarlab.tracking.store import store_faults_named


def run(cfg: SoarConfig) -> None:
    root = project_root()
    with store_faults_named(cfg):
        result, remembered = remembered_reference(cfg, file_sha256(root / cfg.paths.data / SPEED_SET_FILE))
    write_json(root / cfg.paths.reports / REFERENCE_FILE, result)
    how = "; remembered, the store unchanged since" if remembered else ""
    print(f"reference ({result['source']}, {result['runs']} run(s){how}): {result['durations']}")
