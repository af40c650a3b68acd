"""Known-harmless library warnings, dropped one message at a time so that the lines that matter show.

`drop(logger, pattern, why)` filters only records of that logger whose message matches `pattern`;
every other warning of the same library still shows. Each call site says why its message is harmless.
"""

from __future__ import annotations

import logging
import re


class _DropMessage(logging.Filter):
    def __init__(self, pattern: str, why: str):
        super().__init__()
        self.pattern = re.compile(pattern)
        self.why = why

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.search(record.getMessage())


def drop(logger: str, pattern: str, why: str) -> None:
    """Drop `logger`'s records matching `pattern` (idempotent). The logger need not exist yet."""
    target = logging.getLogger(logger)
    if not any(isinstance(f, _DropMessage) and f.pattern.pattern == pattern for f in target.filters):
        target.addFilter(_DropMessage(pattern, why))


def install() -> None:
    """The filters for what any soarlab process meets; called at process start (`soarlab` and the
    transformers serve launcher), before anything imports torch."""
    # torchao, imported by transformers and GPTQModel, logs these on import:
    drop("torchao", r"^Failed to load .*_C_(mxfp8|cutlass_90a)\b",
         "CUDA-only kernels (MX fp8, Hopper cutlass) that a CPU build cannot load; nothing here calls them")
    drop("torch.utils._pytree", r"is an Enum subclass and is now natively supported by torch\.compile",
         "torchao still registers its enums with register_constant; a deprecation for torchao, no effect here")
    drop("transformers.configuration_utils", r"model of type `minicpm_sala` to instantiate a model of type ``",
         "AutoTokenizer on a quantized checkpoint (no auto_map.AutoConfig, RULES.md 7) falls back to the base "
         "config class only to look for a tokenizer class; tokenizer_config.json names it")
