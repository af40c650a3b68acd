"""`python -m sglang.bench_serving`, the official speed tool (RULES.md 2), run on a SOAR-format set.

One place for what every recipe needs from it: the set converted to its `custom` format (one
two-turn conversation per line: user = question, assistant = model_response) and one run whose
figures are read back from `--output-file`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

KEEP = ("duration", "completed", "total_input_tokens", "total_output_tokens", "total_output_tokens_retokenized",
        "request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
        "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "median_itl_ms", "mean_e2e_latency_ms")


def to_custom(rows: list[dict]) -> list[dict]:
    return [{"conversations": [{"role": "user", "content": r["question"]},
                               {"role": "assistant", "content": r["model_response"]}]} for r in rows]


def run(url: str, tokenizer: Path, out_file: Path, *, dataset: Path | None = None, num_prompts: int,
        max_concurrency: int | None = None, random_len: tuple[int, int] | None = None,
        python: str = sys.executable, timeout_s: float | None = None) -> dict:
    """One run on `dataset` (custom) or on random ids of `random_len` (input, output) tokens.
    Returns its figures, or {"rc", "error"}; the command and its output go to out_file.txt."""
    cmd = [python, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url,
           "--model", str(tokenizer), "--tokenizer", str(tokenizer), "--num-prompts", str(num_prompts),
           "--flush-cache", "--seed", "1", "--disable-tqdm", "--output-file", str(out_file), "--output-details"]
    if dataset is not None:
        cmd += ["--dataset-name", "custom", "--dataset-path", str(dataset)]
    else:
        cmd += ["--dataset-name", "random-ids", "--tokenize-prompt", "--random-range-ratio", "1.0",
                "--random-input-len", str(random_len[0]), "--random-output-len", str(random_len[1])]
    if max_concurrency:
        cmd += ["--max-concurrency", str(max_concurrency)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        text, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as exc:
        text, rc = f"timed out after {timeout_s} s: {exc.stdout or ''}", 124
    Path(f"{out_file}.txt").write_text("$ " + " ".join(cmd) + "\n" + text)
    if rc != 0 or not out_file.is_file():
        return {"rc": rc, "error": text.strip()[-1500:]}
    res = json.loads(out_file.read_text().strip().splitlines()[-1])
    out = {"rc": 0, **{k: res.get(k) for k in KEEP}}
    out.update(output_lens=res.get("output_lens"), input_lens=res.get("input_lens"),
               errors=[e for e in (res.get("errors") or []) if e])
    return out
