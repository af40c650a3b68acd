"""Quantization of MiniCPM-SALA checkpoints for SGLang's gptq_marlin kernel, and the checkpoint validator.

Modules:
- `definition`: the GPTQModel model definition for `minicpm_sala` (heterogeneous sparse/lightning layers).
- `rules`: per-module rules (regex and/or layer mixer kind -> bits or keep) resolved to a plan and to
  GPTQModel's / SGLang's `dynamic` field.
- `calibration`: calibration samples (offline default: the embedded corpus).
- `quantize`: the whole job (GPTQ, RTN or none) -> a served-ready directory, written atomically.
- `hf_compat`: reload a quantized checkpoint with transformers (+ optimum + gptqmodel) on CPU.
- `packing`: unpack GPTQ tensors (shared by the validator and the error report).
- `check`: the checkpoint validator of RULES.md 7 (`soarlab check-checkpoint DIR`).
- `report`: sizes, bits per module, per-layer reconstruction error.
"""
