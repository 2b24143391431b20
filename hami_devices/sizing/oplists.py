"""Which precision each ONNX operator may run at, after the autocast-style lists.

Mixed precision (PyTorch autocast, and the float16 converters of the ONNX tool chain
that follow the same idea) sorts operators into three classes:

* ``lowered``: matrix products, convolutions and recurrent cells.  They are bound by
  the matrix units, which are several times faster in 16-bit floats, and they
  accumulate in fp32 internally, so running them in fp16/bf16 costs little accuracy.
* ``fp32``: operators whose result needs fp32's range or whose error compounds:
  exponentials and logarithms, powers and reciprocals, softmax and its log form,
  layer and group normalisation, sums and products over many elements, cumulative
  sums and norms, and the losses.  A plan never lowers them.
* ``neutral``: everything else (elementwise arithmetic, activations, data movement,
  pooling, batch normalisation).  They run in the precision of their inputs, the
  widest one when the inputs differ, so they follow whatever their producers chose.

The classes are written here for the ONNX operator set from those published
semantics (ONNX has one ``ReduceSum`` where PyTorch has ``sum``, ``Pow`` for
``pow``/``__pow__``, ``SoftmaxCrossEntropyLoss`` for ``cross_entropy``, and so on).
"""

from __future__ import annotations

from enum import StrEnum


class OpClass(StrEnum):
    LOWERED = "lowered"
    FP32 = "fp32"
    NEUTRAL = "neutral"


LOWERED_OPS: frozenset[str] = frozenset(
    {
        # matrix products (linear, matmul, bmm, addmm, einsum)
        "MatMul",
        "Gemm",
        "Einsum",
        # convolutions and their transposes
        "Conv",
        "ConvTranspose",
        # recurrent cells (LSTM/GRU/RNN cells are on the lowered list; ONNX fuses the sequence loop)
        "LSTM",
        "GRU",
        "RNN",
        # prelu is listed with the products: its weight is a learned per-channel slope
        "PRelu",
    }
)

FP32_OPS: frozenset[str] = frozenset(
    {
        # exponentials, logarithms, powers, reciprocals, hyperbolic and inverse trigonometric functions
        "Exp",
        "Log",
        "Pow",
        "Reciprocal",
        "Acos",
        "Asin",
        "Cosh",
        "Sinh",
        "Tan",
        "Softplus",
        # softmax family
        "Softmax",
        "LogSoftmax",
        # normalisations over features
        "LayerNormalization",
        "GroupNormalization",
        "LpNormalization",
        "RMSNormalization",
        # reductions that sum or multiply many elements, norms and cumulative operations
        "ReduceSum",
        "ReduceSumSquare",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "CumSum",
        # losses
        "SoftmaxCrossEntropyLoss",
        "NegativeLogLikelihoodLoss",
    }
)


def classify(op_type: str) -> OpClass:
    """The class of an ONNX operator type (operators of other domains count as neutral)."""
    if op_type in LOWERED_OPS:
        return OpClass.LOWERED
    if op_type in FP32_OPS:
        return OpClass.FP32
    return OpClass.NEUTRAL


FLOAT_PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")
"""The floating formats a plan assigns; tf32 is an fp32 storage format and never saves memory."""


def allowed_precisions(op_class: OpClass) -> tuple[str, ...]:
    """The precisions an operator of ``op_class`` may run at (neutral: whatever its inputs carry)."""
    if op_class is OpClass.FP32:
        return ("fp32",)
    return FLOAT_PRECISIONS
