"""Known-harmless library messages, dropped one at a time so that the lines that matter show, and
progress bars on a terminal only.

`drop(logger, pattern, why)` filters only records of that logger whose message matches `pattern`;
every other warning of the same library still shows. Each call site says why its message is harmless.
"""

from __future__ import annotations

import logging
import os
import re
import sys


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


def progress_bars_on_a_terminal_only() -> None:
    """tqdm's bars (ours, transformers', lm-eval's) redraw a line many times a second: on a terminal that
    is one line, in a log file (CI, `dvc repro > log`) hundreds. Without a terminal on stderr they are
    off, through the variables tqdm and huggingface_hub read (inherited by the servers a stage starts);
    a value the user set wins."""
    if not sys.stderr.isatty():
        os.environ.setdefault("TQDM_DISABLE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def install() -> None:
    """The filters for what any soarlab process meets; called at process start (`soarlab` and the
    transformers serve launcher), before anything imports torch."""
    progress_bars_on_a_terminal_only()
    # torchao, imported by transformers and GPTQModel, logs these on import:
    drop("torchao", r"^Failed to load .*_C_(mxfp8|cutlass_90a)\b",
         "CUDA-only kernels (MX fp8, Hopper cutlass) that a CPU build cannot load; nothing here calls them")
    drop("torch.utils._pytree", r"is an Enum subclass and is now natively supported by torch\.compile",
         "torchao still registers its enums with register_constant; a deprecation for torchao, no effect here")
    drop("transformers.configuration_utils", r"model of type `minicpm_sala` to instantiate a model of type ``",
         "AutoTokenizer on a quantized checkpoint (no auto_map.AutoConfig, RULES.md 7) falls back to the base "
         "config class only to look for a tokenizer class; tokenizer_config.json names it")
    drop("lm_eval.config.task", r"No `generation_kwargs` specified in task config",
         "the correctness task's generation settings come from conf/eval, set over the defaults this names "
         "by soarlab.accuracy.runner.evaluate_tasks")
    drop("mlflow.store.db.utils", r"^(Creating initial MLflow database tables|Updating database tables)",
         "a new local store being made (the first run's track stage); nothing for the user to do")
