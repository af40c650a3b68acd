"""Read GPTQ tensors as stored on disk (int32 packing, checkpoint format v1), independent of GPTQModel.

Layout for a linear layer with `in` inputs, `out` outputs, `bits` b and group size g:
    qweight [in*b/32, out]   int32, 32/b values along the input dimension, lowest bits first
    qzeros  [in/g, out*b/32] int32, 32/b values along the output dimension
    scales  [in/g, out]      float16/bfloat16
    g_idx   [in]             int32, the group of each input row (i // g unless desc_act)
Format v1 (`checkpoint_format: gptq`, what SGLang reads) stores zero-1: the effective zero point of
a symmetric b-bit layer is 2^(b-1) (8 for 4-bit, 128 for 8-bit), stored as 2^(b-1)-1. gptq_marlin
ignores qzeros for sym checkpoints and applies the fixed bias 2^(b-1) (uint4b8 / uint8b128), so the
stored zeros must be 2^(b-1)-1 everywhere or the plain GPTQ kernels and Marlin disagree.
"""

from __future__ import annotations

import torch

PACK_BITS = 32


def unpack_rows(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """[R, C] int32 -> [R*32/bits, C] ints (values packed along dim 0)."""
    shifts = torch.arange(0, PACK_BITS, bits, dtype=torch.int32)
    vals = (packed.to(torch.int32).unsqueeze(1) >> shifts.view(1, -1, 1)) & ((1 << bits) - 1)
    return vals.reshape(-1, packed.shape[1])


def unpack_cols(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """[R, C] int32 -> [R, C*32/bits] ints (values packed along dim 1)."""
    shifts = torch.arange(0, PACK_BITS, bits, dtype=torch.int32)
    vals = (packed.to(torch.int32).unsqueeze(2) >> shifts.view(1, 1, -1)) & ((1 << bits) - 1)
    return vals.reshape(packed.shape[0], -1)


def dequantize(qweight, qzeros, scales, g_idx, bits: int, format_version: int = 1) -> torch.Tensor:
    """The float weight [out, in] a GPTQ layer stands for."""
    q = unpack_rows(qweight, bits).float()                  # [in, out]
    z = unpack_cols(qzeros, bits).float()                   # [groups, out]
    if format_version == 1:
        z = z + 1
    g = g_idx.long()
    w = scales.float()[g] * (q - z[g])                      # [in, out]
    return w.t().contiguous()
