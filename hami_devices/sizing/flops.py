"""Floating-point operations of one operator from its tensor shapes (multiply-adds count two).

Matrix products, convolutions and recurrent cells are counted exactly from their
shapes; every other operator is taken as one operation per output element, which is
what decides it anyway: those operators are bound by memory traffic, not arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import prod

Shape = tuple[int, ...]


def _elementwise(outputs: Sequence[Shape]) -> float:
    return float(sum(prod(s) for s in outputs))


def _einsum(equation: str, inputs: Sequence[Shape], outputs: Sequence[Shape]) -> float:
    lhs, _, rhs = equation.replace(" ", "").partition("->")
    sizes: dict[str, int] = {}
    for term, shape in zip(lhs.split(","), inputs, strict=False):
        letters = [c for c in term if c.isalpha()]
        if "." in term or len(letters) != len(shape):
            return _elementwise(outputs)  # broadcast ellipses: fall back
        sizes.update(zip(letters, shape, strict=True))
    contracted = [c for c in sizes if c not in rhs]
    return 2.0 * _elementwise(outputs) * prod(sizes[c] for c in contracted)


def op_flops(
    op_type: str, inputs: Sequence[Shape | None], outputs: Sequence[Shape], attrs: Mapping[str, object]
) -> float:
    """Operations of one execution of ``op_type`` (inputs: shapes, None where the input is absent)."""
    x = inputs[0] if inputs else None
    w = inputs[1] if len(inputs) > 1 else None
    out = outputs[0] if outputs else None
    if out is None or x is None:
        return _elementwise(outputs)
    if op_type == "MatMul" and x:
        return 2.0 * prod(out) * x[-1]
    if op_type == "Gemm" and len(x) == 2:
        inner = x[0] if attrs.get("transA") else x[1]
        return 2.0 * prod(out) * inner
    if op_type == "Conv" and w is not None and len(w) >= 2:
        return 2.0 * prod(out) * prod(w[1:])  # W: [M, C/group, k...]
    if op_type == "ConvTranspose" and w is not None and len(w) >= 2:
        return 2.0 * prod(x) * prod(w[1:])  # W: [C, M/group, k...]
    if op_type in ("LSTM", "GRU", "RNN") and w is not None and len(x) == 3 and len(w) == 3:
        seq, batch, features = x
        directions, gates_hidden, _ = w
        hidden = attrs.get("hidden_size", 0)
        hidden = hidden if isinstance(hidden, int) else 0
        return float(2.0 * seq * batch * directions * gates_hidden * (features + hidden))
    if op_type == "Einsum":
        equation = attrs.get("equation", "")
        if isinstance(equation, bytes):
            equation = equation.decode()
        if isinstance(equation, str) and "->" in equation and all(s is not None for s in inputs):
            return _einsum(equation, [s for s in inputs if s is not None], outputs)
    return _elementwise(outputs)
