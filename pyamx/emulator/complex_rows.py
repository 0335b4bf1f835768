"""AMX-COMPLEX (TCMMIMFP16PS, TCMMRLFP16PS) as TDPFP16PS on a transformed A.

Each dword of A and B is one complex number, fp16 real part in bits 15:0 and
imaginary part in bits 31:16. The SDM runs, per output element, two fp32
accumulators from +0 (docs/semantics.md section 8):

    TCMMIMFP16PS: acc_e = fma32(acc_e, a_im, b_re);  acc_o = fma32(acc_o, a_re, b_im)
    TCMMRLFP16PS: acc_e = fma32(acc_e, a_re, b_re);  acc_o = fma32(acc_o, -a_im, b_im)

then C + (acc_e + acc_o). TDPFP16PS runs the same skeleton with
acc_e += a_lo * b_re and acc_o += a_hi * b_im, every step under the same
rules (RNE, DAZ/FTZ, fp16 inputs widened exactly). So with A' = A with the
two halves of every dword swapped, TCMMIMFP16PS(C, A, B) computes the very
fma32 and add32 steps of TDPFP16PS(C, A', B): the same operand values in the
same lanes in the same order (the multiplication a * b = b * a inside one
rounding is commutative, and the lanes are not exchanged). With A'' = A with
bit 31 of every dword flipped (the fp16 sign of a_im), TCMMRLFP16PS(C, A, B)
is TDPFP16PS(C, A'', B): the SDM negates the fp16 a_im *before* converting
it, and the exact fp16 -> fp32 conversion carries the sign bit through
unchanged, NaNs included, so the fp32 operand is bit for bit the converted
A'' half. Numerics options that change the structure ("straight",
"fused_pair", "wide"), tininess and the DAZ of C act on those same steps, so
the identity holds for them too, with one exception: NaN selection.

The SDM writes the complex steps fma32(acc, a, b), TDPFP16PS's
``acc += a * b``; under the "x86" rule (the first NaN operand in the order
written) a NaN accumulator therefore wins over a NaN a or b here, where
TDPFP16PS takes a's (or b's). The transformed operands are unchanged by
that, only the NaN priority differs, so the arithmetic runs the TDPFP16PS
machinery with ``acc_first`` set: the only paths that see NaN operands (the
bits tier, the compiled engines' exact path) put the accumulator first.
"""

from __future__ import annotations

import numpy as np

from ..table import isa

#: the complex rows whose A halves are swapped (the imaginary part); the other negates a_im
_SWAPS = {insn.name: insn.part == "imaginary" for insn in isa.DOTS if insn.kind == "dot-complex"}
assert all(insn.part in ("imaginary", "real") for insn in isa.DOTS if insn.kind == "dot-complex")
COMPLEX_OPS = tuple(_SWAPS)


def is_complex(name: str) -> bool:
    """Whether dot product ``name`` is an AMX-COMPLEX row."""
    return name in _SWAPS


def fp16_operand(name: str, a: np.ndarray) -> np.ndarray:
    """The TDPFP16PS A of complex row ``name``: ``a`` (M, 2K) fp16 bits, re/im interleaved -> new uint16 bits."""
    a = np.asarray(a).view(np.uint16)
    pairs = a.reshape(a.shape[0], -1, 2)
    if _SWAPS[name]:
        return np.ascontiguousarray(pairs[:, :, ::-1]).reshape(a.shape)
    out = pairs.copy()
    out[:, :, 1] ^= np.uint16(0x8000)
    negated: np.ndarray = out.reshape(a.shape)
    return negated
