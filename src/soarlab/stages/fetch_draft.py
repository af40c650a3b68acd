"""Stage fetch-draft: write `paths.draft_model`, the speculative-decoding draft the `spec` group names.

spec.draft.source: none, or an algorithm that uses no draft (spec=none, spec=ngram) -> a folder holding
only NO_DRAFT (nothing is served from it); embedded -> the tiny model's draft shipped with the package,
checked against its sha256 manifest; huggingface | modelscope | local -> soarlab.hub at the pinned
spec.draft.revision. DVC records the folder's hash in
dvc.lock, so package and evaluate re-run when the draft changes, and a draft change never re-quantizes
the target. Writes reports/fetch-draft/metrics.json: draft_bytes, draft_files.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from soarlab.atomic import atomic_dir, write_json
from soarlab.paths import METRICS_FILE, project_root
from soarlab.schema import SoarConfig

NO_DRAFT = "NO_DRAFT"  # the one file of the folder when no draft is used


def run(cfg: SoarConfig) -> Path:
    from soarlab import hub

    from soarlab.speculative import needs_draft

    root = project_root()
    target = root / cfg.paths.draft_model
    draft = cfg.spec.draft
    if draft.source == "none" or not needs_draft(cfg.spec):
        with atomic_dir(target) as tmp:
            (tmp / NO_DRAFT).write_text(f"spec={cfg.spec.name}: no speculative-decoding draft\n")
    elif draft.source == "embedded":
        from soarlab.tiny import DRAFT_DIR, install_tiny_model

        install_tiny_model(target, DRAFT_DIR)
    else:
        hub.fetch_model(SimpleNamespace(source=draft.source, repo_id=draft.repo_id, revision=draft.revision,
                                        modelscope_id=draft.repo_id, modelscope_revision=draft.revision,
                                        local_path=draft.local_path), target)
    fetched = not (target / NO_DRAFT).exists()
    if fetched:
        hub.validate_model_dir(target)
    files = [p for p in target.rglob("*") if p.is_file()] if fetched else []
    draft_bytes = sum(p.stat().st_size for p in files)
    write_json(root / cfg.paths.reports / "fetch-draft" / METRICS_FILE, {"draft_bytes": draft_bytes, "draft_files": len(files)})
    print(f"fetch-draft: {target} ({draft_bytes} bytes)" if fetched else f"fetch-draft: no draft (spec={cfg.spec.name} uses none)")
    return target
