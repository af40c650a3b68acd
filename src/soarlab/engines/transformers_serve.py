"""`python -m soarlab.engines.transformers_serve serve MODEL_DIR ...`: `transformers serve` for remote-code models.

transformers 5.x `transformers serve` loads a forced model with
`getattr(transformers, config.architectures[0]).from_pretrained(...)`
(transformers/cli/serving/model_manager.py, `ModelManager._load_model`). An architecture that
only exists as remote code (`auto_map`, `trust_remote_code`), such as MiniCPM-SALA's
`MiniCPMSALAForCausalLM`, is not an attribute of the `transformers` module, so the server
dies at startup with `AttributeError: module transformers has no attribute ...`.

This launcher makes exactly that lookup resolve: when the forced model's architecture is not
in transformers and its `config.json` maps `AutoModelForCausalLM` to remote code, it binds the
architecture name to a loader that goes through `AutoModelForCausalLM.from_pretrained` (which
honours `trust_remote_code` and `auto_map`, the documented path for remote code). It also takes
SGLang's `--speculative-*` flags and decodes speculatively as they ask (soarlab.engines.cpu_speculation), and
SGLang's `--quantization fp8`, rounding the weights to FP8 at load as SGLang quantizes them (soarlab.quant.fp8).
Everything else is the unmodified `transformers` CLI.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from soarlab.engines import cpu_speculation
from soarlab.quant import fp8


def _force_model(argv: list[str]) -> str | None:
    """The positional FORCE_MODEL after `serve` (options taking a value are skipped)."""
    takes_value = {"--attn-implementation", "--quantization", "--reasoning", "--chat-template-kwargs",
                   "--decision-config", "--device", "--dtype", "--model-timeout", "--cb-block-size",
                   "--cb-num-blocks", "--cb-max-batch-tokens", "--cb-max-memory-percent", "--host",
                   "--port", "--log-level", "--default-seed", "--format"}
    args = argv[argv.index("serve") + 1:] if "serve" in argv else []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in takes_value:
            i += 2
            continue
        if not arg.startswith("-"):
            return arg
        i += 1
    return None


def register_remote_architecture(model_dir: str | Path) -> str | None:
    """Bind `transformers.<Architecture>` for a local remote-code model; returns the name bound, if any."""
    import transformers

    config_path = Path(model_dir) / "config.json"
    if not config_path.is_file():
        return None
    config = json.loads(config_path.read_text())
    archs = config.get("architectures") or []
    if not archs or "AutoModelForCausalLM" not in (config.get("auto_map") or {}):
        return None
    arch = archs[0]
    try:
        getattr(transformers, arch)
        return None  # transformers has it natively: nothing to do
    except AttributeError:
        pass

    class RemoteCodeCausalLM:
        """Stands in for the remote class name; loads through the auto class."""

        @classmethod
        def from_pretrained(cls, *args, **kwargs):
            return transformers.AutoModelForCausalLM.from_pretrained(*args, **kwargs)

    RemoteCodeCausalLM.__name__ = arch
    setattr(transformers, arch, RemoteCodeCausalLM)
    return arch


def main(argv: list[str] | None = None) -> int:
    from soarlab import quiet, startup

    startup.collect_less_at_import()
    quiet.install()  # before transformers imports torch: the server log keeps only what matters
    argv = list(sys.argv[1:] if argv is None else argv)
    speculation = cpu_speculation.pop_flags(argv)
    fp8_weights = fp8.pop_flag(argv)
    if "--trust-remote-code" in argv:
        model = _force_model(argv)
        if model:
            # Quantized checkpoints drop auto_map.AutoConfig and carry per-module bits (RULES.md 7).
            # First: importing GPTQModel replaces the `transformers` module, which would drop the binding below.
            from soarlab.quant.hf_compat import prepare

            prepare(model)
            register_remote_architecture(model)
            if fp8_weights:
                fp8.install(model)
    if speculation is not None:  # after GPTQModel's import, which replaces the `transformers` module
        cpu_speculation.install(speculation)
    from transformers.cli.transformers import main as transformers_main

    sys.argv = ["transformers", *argv]
    return transformers_main() or 0


if __name__ == "__main__":
    sys.exit(main())
