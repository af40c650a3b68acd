"""Turn speed-set rows into the requests the official tool sends (RULES.md 2, bench_serving's custom dataset).

Order semantics of `sample_custom_requests`: bench_serving seeds Python's `random` with `--seed`
(default 1), reads every row, `random.shuffle`s the whole list, then walks it in that order,
tokenizing and dropping rows whose prompt or output has fewer than 2 tokens. So the shuffle
happens before the drop; `random.Random(seed).shuffle` gives the same permutation as the
seeded module-level `random.shuffle`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class BenchRequest:
    index: int  # position in the send order
    line: int  # line of the dataset file
    prompt: str
    prompt_len: int  # tokens of the prompt (tokenizer defaults: BOS counted)
    output_len: int  # tokens asked for: len(tokenizer.encode(model_response))


def shuffled(rows: list, seed: int) -> list:
    out = list(rows)
    random.Random(seed).shuffle(out)
    return out


def build_requests(
    rows: list[dict], tokenizer, seed: int = 1, min_tokens: int = 2, apply_chat_template: bool = False
) -> tuple[list[BenchRequest], list[dict]]:
    """(requests in send order, dropped rows as {line, prompt_len, output_len, reason})."""
    requests: list[BenchRequest] = []
    dropped: list[dict] = []
    for row in shuffled(rows, seed):
        prompt = row["prompt"]
        if apply_chat_template:
            prompt = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            if tokenizer.bos_token:
                prompt = prompt.replace(tokenizer.bos_token, "")
        prompt_len = len(tokenizer.encode(prompt))
        output_len = len(tokenizer.encode(row["model_response"]))
        if prompt_len < min_tokens or output_len < min_tokens:
            dropped.append(
                {"line": row["line"], "prompt_len": prompt_len, "output_len": output_len,
                 "reason": f"prompt or output under {min_tokens} tokens"}
            )
            continue
        requests.append(BenchRequest(len(requests), row["line"], prompt, prompt_len, output_len))
    return requests, dropped
