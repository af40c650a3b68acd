"""The domain words: names the competition and the model fix, defined once for every module.

Numbers that could change (weights, concurrencies, thresholds) live in conf/; these are names code
must agree on. A test checks LEVELS against `bench.levels` and `score.weights` of the composed config.
"""

from __future__ import annotations

import re

# The three speed levels, in scoring order (RULES.md 1, 2). Keys of bench.levels and score.weights.
LEVELS = ("S1", "S8", "Smax")

# A decoder-layer tensor or module name (RULES.md 5): group 1 the layer index, group 2 the rest.
LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")

# GPTQ checkpoint formats (quantization_config.checkpoint_format). v1 stores zero - 1, which is what
# SGLang's gptq / gptq_marlin kernels read (RULES.md 7); v2 stores the zero point itself.
GPTQ_V1 = "gptq"
GPTQ_V2 = "gptq_v2"


def gptq_format_version(checkpoint_format: str) -> int:
    """2 for gptq_v2, else 1 (a checkpoint without the key is v1)."""
    return 2 if checkpoint_format == GPTQ_V2 else 1
