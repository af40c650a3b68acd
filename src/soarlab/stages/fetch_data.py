"""fetch-data: the speed set and the correctness set the later stages run on, into data/.

The speed set is generated with the base model's tokenizer (token-exact lengths) or copied
from a file; the correctness set is the embedded one, a pinned download, or a file.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Callable

from soarlab.atomic import atomic_path, write_jsonl
from soarlab.datasets.correctness import fetch_correctness_set, read_correctness_set
from soarlab.datasets.soar import read_speed_set
from soarlab.errors import SoarError
from soarlab.paths import CORRECTNESS_SET_FILE, SPEED_SET_FILE, project_root
from soarlab.schema import BenchGroup, SoarConfig


def write_speed_set(bench_cfg: BenchGroup, tokenizer_of: Callable, dest: Path) -> None:
    """Your file when bench.dataset.path is set, else a set generated for the model's tokenizer
    (`tokenizer_of()`); every request within the model's context."""
    from soarlab.datasets.speed import check_context, check_profile_context, context_length, make_speed_set, named_profile

    dataset_cfg = bench_cfg.dataset
    if dataset_cfg.path:
        src = Path(dataset_cfg.path)
        if not src.is_file():
            raise SoarError(f"speed set {src} not found", "set bench.dataset.path to an existing SOAR-format JSONL file")
        rows = read_speed_set(src, dataset_cfg.max_line_bytes)  # a malformed file refused, with its line number
        tokenizer = tokenizer_of()
        limit = context_length(tokenizer)
        check_context(((r["line"], len(tokenizer.encode(r["prompt"])), len(tokenizer.encode(r["model_response"])))
                       for r in rows), limit, src)
        with atomic_path(dest) as tmp:
            shutil.copyfile(src, tmp)
        return
    profile, tokenizer = named_profile(bench_cfg.profiles, dataset_cfg.profile), tokenizer_of()
    check_profile_context(profile, dataset_cfg.profile, context_length(tokenizer))
    rows = make_speed_set(tokenizer, profile, dataset_cfg.num_requests, dataset_cfg.seed, progress=True)
    write_jsonl(dest, rows)


def check_questions(path: Path, tokenizer) -> None:
    """Every correctness question leaves the model room to answer (one token at least)."""
    from soarlab.datasets.speed import check_context, context_length

    check_context(((row["line"], len(tokenizer.encode(row["question"])), 1) for row in read_correctness_set(path)),
                  context_length(tokenizer), path)


def run(cfg: SoarConfig) -> None:
    from soarlab.datasets.speed import load_tokenizer

    root = project_root()
    data = root / cfg.paths.data
    tokenizer_of = functools.cache(lambda: load_tokenizer(str(root / cfg.paths.base_model)))  # after a file's own checks
    write_speed_set(cfg.bench, tokenizer_of, data / SPEED_SET_FILE)
    fetch_correctness_set(cfg.eval.dataset, data / CORRECTNESS_SET_FILE)
    check_questions(data / CORRECTNESS_SET_FILE, tokenizer_of())
