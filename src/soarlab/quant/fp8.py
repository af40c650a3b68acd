"""FP8 weights on the CPU: what SGLang's `--quantization fp8` does to unquantized weights at load, emulated.

The fp8 preset (conf/quant/fp8.yaml) keeps the bf16 checkpoint; SGLang quantizes its linear layers to FP8
when it loads them. `transformers serve` has no FP8 kernels on a CPU, so its launcher
(soarlab.engines.transformers_serve) takes SGLang's flag and rounds each linear layer's weights to FP8 e4m3
and back, with one scale per output channel (the largest magnitude of the row maps to e4m3's largest
value). The model then computes in bf16 with exactly the values an FP8 weight can hold: FP8's accuracy
cost shows on the CPU as well, its speed does not. lm_head is kept, as SGLang keeps it (a vocabulary
embedding there, not a linear layer it quantizes).
"""

from __future__ import annotations

FLAG = ("--quantization", "fp8")  # SGLang's flag; the CPU launcher takes it out of transformers' argv
KEPT = ("lm_head",)


def round_to_fp8(weight):
    """`weight` (out x in) rounded to FP8 e4m3 with a per-output-channel scale, and back, in its own dtype."""
    import torch

    e4m3 = torch.float8_e4m3fn
    w = weight.float()
    scale = w.abs().amax(dim=1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny) / torch.finfo(e4m3).max
    return ((w / scale).to(e4m3).float() * scale).to(weight.dtype)


def round_linear_weights(model) -> int:
    """Round every linear layer's weight but lm_head's in place; returns how many were rounded."""
    import torch

    count = 0
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and name.split(".")[-1] not in KEPT:
                module.weight.copy_(round_to_fp8(module.weight))
                count += 1
    return count


def pop_flag(argv: list[str]) -> bool:
    """Take SGLang's `--quantization fp8` out of `argv` (transformers' own `--quantization` values stay)."""
    for i in range(len(argv) - 1):
        if (argv[i], argv[i + 1]) == FLAG:
            del argv[i:i + 2]
            return True
    return False


def install(model_dir) -> None:
    """Make `transformers serve`'s load of `model_dir` round its linear weights (`transformers.<Architecture>`,
    the class it loads through, wrapped)."""
    import json
    from pathlib import Path

    import transformers

    arch = json.loads((Path(model_dir) / "config.json").read_text())["architectures"][0]
    loader = getattr(transformers, arch)

    class Fp8Weights:
        @classmethod
        def from_pretrained(cls, *args, **kwargs):
            model = loader.from_pretrained(*args, **kwargs)
            print(f"soarlab: FP8 e4m3 weights (per output channel): {round_linear_weights(model)} linear layers rounded",
                  flush=True)
            return model

    Fp8Weights.__name__ = arch
    setattr(transformers, arch, Fp8Weights)
