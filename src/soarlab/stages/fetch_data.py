"""fetch-data: the speed set and the correctness set the later stages run on, into data/.

The speed set is generated with the base model's tokenizer (token-exact lengths) or copied
from a file; the correctness set is the embedded one, a pinned download, or a file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from soarlab.atomic import atomic_path, write_jsonl
from soarlab.datasets.correctness import fetch_correctness_set
from soarlab.datasets.soar import read_speed_set
from soarlab.errors import SoarError
from soarlab.paths import project_root
from soarlab.schema import BenchGroup, SoarConfig


def write_speed_set(bench_cfg: BenchGroup, model_dir: Path, dest: Path) -> None:
    """Your file when bench.dataset.path is set, else a set generated for the model's tokenizer."""
    dataset_cfg = bench_cfg.dataset
    if dataset_cfg.path:
        src = Path(dataset_cfg.path)
        if not src.is_file():
            raise SoarError(f"speed set {src} not found", "set bench.dataset.path to an existing SOAR-format JSONL file")
        read_speed_set(src)  # refuse a malformed file here, with its line number
        with atomic_path(dest) as tmp:
            shutil.copyfile(src, tmp)
        return
    from soarlab.datasets.speed import load_tokenizer, make_speed_set, named_profile

    profile = named_profile(bench_cfg.profiles, dataset_cfg.profile)
    rows = make_speed_set(load_tokenizer(str(model_dir)), profile, dataset_cfg.num_requests, dataset_cfg.seed, progress=True)
    write_jsonl(dest, rows)


def run(cfg: SoarConfig) -> None:
    root = project_root()
    data = root / cfg.paths.data
    write_speed_set(cfg.bench, root / cfg.paths.base_model, data / "speed.jsonl")
    fetch_correctness_set(cfg.eval.dataset, data / "correctness.jsonl")
