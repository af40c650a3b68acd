"""lm-eval's `local-chat-completions` with the official script's fault handling.

lm-eval aborts the whole evaluation when one request still fails after its retries. The
official correctness script instead records that sample as failed and scores it 0. The class
below keeps everything of `LocalChatCompletion` (payload, parsing, concurrency) and changes only
that: a request is tried 1 + `retries` times, and then its generation is a marker that the task
hooks and the stage read as "failed, score 0".
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

from lm_eval.api.registry import register_model
from lm_eval.models.openai_completions import LocalChatCompletion

from soarlab.accuracy.grading import FAILED_PREFIX
from soarlab.errors import SoarError

log = logging.getLogger(__name__)
MODEL_NAME = "soar-chat-completions"


def failed_marker(exc: BaseException) -> str:
    return f"{FAILED_PREFIX}{type(exc).__name__}: {exc}"[:2000]


def parse_failed(prediction: str | None) -> tuple[bool, str | None]:
    """(failed, error message) of a generation returned by SoarChatCompletion."""
    if isinstance(prediction, str) and prediction.startswith(FAILED_PREFIX):
        return True, prediction[len(FAILED_PREFIX):] or "request failed"
    return False, None


@register_model(MODEL_NAME)
class SoarChatCompletion(LocalChatCompletion):
    def __init__(self, retries: int = 2, retry_backoff_s: float = 0.5, **kwargs):
        # lm-eval's own retry wrapper sees no exceptions from us; give it one attempt.
        super().__init__(max_retries=1, **kwargs)
        self.attempts = 1 + int(retries)
        self.backoff = float(retry_backoff_s)
        self.failures = 0
        self.usage: dict[str, tuple[int, bool]] = {}  # answer text -> (generated tokens, stopped at the cap)

    def parse_generations(self, outputs, **kwargs) -> list[str]:
        """lm-eval's parse, and each answer's `usage.completion_tokens` and `finish_reason` where the server
        gives them (soarlab.accuracy.lengths), keyed by the answer's text: lm-eval keeps only the text."""
        texts = super().parse_generations(outputs, **kwargs)
        for out, text in zip(outputs if isinstance(outputs, list) else [outputs], texts):
            choices, usage = out.get("choices") or [], out.get("usage") or {}
            if len(choices) == 1 and isinstance(usage.get("completion_tokens"), int) and isinstance(text, str):
                self.usage[text] = (usage["completion_tokens"], choices[0].get("finish_reason") == "length")
        return texts

    async def amodel_call(self, session, sem, messages, **kwargs):
        error: BaseException | None = None
        for attempt in range(self.attempts):
            try:
                return await super().amodel_call(session, sem, messages, **kwargs)
            except Exception as exc:  # noqa: BLE001 - any server/transport fault counts as a failed attempt
                error = exc
                if attempt + 1 < self.attempts:
                    await asyncio.sleep(self.backoff * (2**attempt))
        self.failures += 1
        log.warning("request failed after %d attempts, scored 0: %r", self.attempts, error)
        return [failed_marker(error)] * max(1, len(messages))

    def model_call(self, messages, **kwargs):
        error: BaseException | None = None
        for attempt in range(self.attempts):
            try:
                result = super().model_call(messages, **kwargs)
                if result is not None:
                    return result
                error = RuntimeError("no response")
            except Exception as exc:  # noqa: BLE001
                error = exc
            if attempt + 1 < self.attempts:
                time.sleep(self.backoff * (2**attempt))
        self.failures += 1
        log.warning("request failed after %d attempts, scored 0: %r", self.attempts, error)
        marker = failed_marker(error)
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": marker}}]}


def eos_stop_strings(model_dir: str | Path) -> list[str]:
    """The model's EOS tokens as strings: ids from generation_config.json (else config.json), via its tokenizer."""
    model_dir = Path(model_dir)
    ids = None
    for name in ("generation_config.json", "config.json"):
        path = model_dir / name
        if path.is_file():
            value = json.loads(path.read_text()).get("eos_token_id")
            if value is not None:
                ids = value if isinstance(value, list) else [value]
                break
    if not ids:
        raise SoarError(
            f"no eos_token_id in {model_dir}/generation_config.json or config.json",
            "point paths.quantized_model at a complete checkpoint (config.json with eos_token_id)",
        )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    tokens = tokenizer.convert_ids_to_tokens([int(i) for i in ids])
    if any(t is None for t in tokens):
        raise SoarError(f"EOS ids {ids} of {model_dir} are not in its tokenizer", "use a checkpoint whose tokenizer matches its config")
    return list(dict.fromkeys(tokens))
