"""Calibration samples for GPTQ: fixed-length token windows from a text source.

Sources (`quant.calibration.source`):
- `corpus`: the project's embedded text, src/soarlab/tiny/corpus.txt (offline default);
- a path (relative to the project root or absolute) to a `.txt` file, or a `.jsonl` file whose rows
  carry text in `text`, `question`, `prompt` or `input` (SOAR-format sets work as they are).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from soarlab.corpus import CORPUS_PATH
from soarlab.errors import SoarError

_TEXT_KEYS = ("text", "question", "prompt", "input")


def _texts(source: str, root: Path | None) -> list[str]:
    if source == "corpus":
        return [p for p in CORPUS_PATH.read_text().split("\n\n") if p.strip()]
    path = Path(source)
    if not path.is_absolute() and root is not None:
        path = root / path
    if not path.is_file():
        raise SoarError(f"calibration source {source} not found", "set quant.calibration.source to corpus or an existing .txt/.jsonl file")
    if path.suffix == ".jsonl":
        rows = []
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                text = next((row[k] for k in _TEXT_KEYS if isinstance(row.get(k), str)), None)
                if text:
                    rows.append(text)
        return rows
    return [p for p in path.read_text().split("\n\n") if p.strip()]


def calibration_samples(tokenizer, source: str, num_samples: int, seq_len: int, seed: int = 0,
                        root: Path | None = None) -> tuple[list[dict], list[str]]:
    """`num_samples` windows of exactly `seq_len` tokens (input_ids + attention_mask), and any warnings.

    The texts are concatenated (in a seeded order) into one token stream cut into windows; if the
    source is shorter than num_samples * seq_len tokens, windows start at seeded random offsets
    and overlap (a warning says so).
    """
    texts = _texts(source, root)
    rng = random.Random(seed)
    rng.shuffle(texts)
    sep = tokenizer.eos_token or "\n\n"
    ids = tokenizer(sep.join(texts), add_special_tokens=False, verbose=False)["input_ids"]  # cut into windows below
    warnings = []
    if len(ids) < seq_len:
        raise SoarError(f"calibration source {source} has {len(ids)} tokens, fewer than seq_len={seq_len}",
                        "use a larger source or a smaller quant.calibration.seq_len")
    if len(ids) >= num_samples * seq_len:
        starts = [i * seq_len for i in range(num_samples)]
    else:
        warnings.append(f"calibration source {source} has {len(ids)} tokens < {num_samples}x{seq_len}: windows overlap")
        starts = [rng.randrange(0, len(ids) - seq_len + 1) for _ in range(num_samples)]
    return [{"input_ids": ids[s: s + seq_len], "attention_mask": [1] * seq_len} for s in starts], warnings
