"""The embedded default model: a tiny MiniCPM-SALA-shaped checkpoint shipped with the package.

`checkpoint/` holds it whole (config, bf16 weights, tokenizer, chat template, remote code), with the
sha256 of every file in `checkpoint/SHA256SUMS`. fetch-model copies these bytes, so `models/base` is
the same on every machine; `scripts/build_tiny_model.py` regenerates them (soarlab.tiny.build).
`draft/` is the speculative-decoding draft for it (spec=standalone), shipped and checked the same way.
"""

from soarlab.tiny.embedded import CHECKPOINT_DIR, DRAFT_DIR, install_tiny_model, verify_checkpoint

__all__ = ["CHECKPOINT_DIR", "DRAFT_DIR", "install_tiny_model", "verify_checkpoint"]
