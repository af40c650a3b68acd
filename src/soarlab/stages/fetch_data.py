"""fetch-data: the speed set and the correctness set the later stages run on, into data/.

The speed set is generated with the base model's tokenizer (token-exact lengths) or copied
from a file; the correctness set is the embedded one, a pinned download, or a file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from omegaconf import DictConfig

from soarlab.accuracy.dataset import fetch_correctness_set
from soarlab.atomic import atomic_path, write_jsonl
from soarlab.errors import SoarError
from soarlab.paths import project_root


def write_speed_set(dataset_cfg: DictConfig, model_dir: Path, dest: Path) -> None:
    if dataset_cfg.source == "generated":
        from transformers import AutoTokenizer

        from soarlab.datasets.speed import make_speed_set

        tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
        write_jsonl(dest, make_speed_set(tokenizer, dataset_cfg.profile, dataset_cfg.num_requests, dataset_cfg.seed))
    elif dataset_cfg.source == "file":
        src = Path(dataset_cfg.path)
        if not src.is_file():
            raise SoarError(f"speed set {src} not found", "set bench.dataset.path to an existing SOAR-format JSONL file")
        with atomic_path(dest) as tmp:
            shutil.copyfile(src, tmp)
    else:
        raise SoarError(f"unknown bench.dataset.source {dataset_cfg.source!r}", "use generated or file")


def run(cfg: DictConfig) -> None:
    root = project_root()
    data = root / cfg.paths.data
    write_speed_set(cfg.bench.dataset, root / cfg.paths.base_model, data / "speed.jsonl")
    fetch_correctness_set(cfg.eval.dataset, data / "correctness.jsonl")
