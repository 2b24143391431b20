"""A corpus of models built here with random weights and exported to ONNX, one per family.

Each builder writes the graph node by node with ``onnx.helper`` as an exporter would
emit it for the named architecture (no download): a ResNet-style and a MobileNet-style
CNN, a transformer encoder, a decoder-only LM block stack, a vision transformer, a
U-Net, an MLP recommender, an LSTM and a GRU classifier.  The batch dimension is
symbolic; ``feeds`` makes inputs for a batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Builder:
    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.inputs: list[Any] = []
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def param(self, shape: tuple[int, ...], scale: float | None = None, value: float | None = None) -> str:
        name = self.fresh("w")
        if value is not None:
            array = np.full(shape, value, dtype=np.float32)
        else:
            fan_in = max(1, math.prod(shape[1:]) if len(shape) > 1 else shape[0])
            array = self.rng.normal(0.0, scale or 1.0 / math.sqrt(fan_in), shape).astype(np.float32)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def const(self, array: np.ndarray) -> str:
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs: Any) -> Any:
        names = [self.fresh(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=self.fresh(op_type), **attrs))
        return names[0] if outputs == 1 else names

    def input(self, name: str, elem: int, shape: list[Any]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    # layers -----------------------------------------------------------------
    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, bias: bool = False) -> str:
        w = self.param((cout, cin // group, k, k))
        inputs = [x, w, self.param((cout,), value=0.0)] if bias else [x, w]
        pad = k // 2
        return self.op("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=group)

    def bn(self, x: str, c: int) -> str:
        return self.op(
            "BatchNormalization",
            [x, self.param((c,), value=1.0), self.param((c,), value=0.0), self.param((c,), value=0.0),
             self.param((c,), value=1.0)],
        )  # fmt: skip

    def linear(self, x: str, din: int, dout: int) -> str:
        return self.op("Add", [self.op("MatMul", [x, self.param((din, dout))]), self.param((dout,), value=0.0)])

    def layernorm(self, x: str, d: int) -> str:
        return self.op("LayerNormalization", [x, self.param((d,), value=1.0), self.param((d,), value=0.0)], axis=-1)

    def gelu(self, x: str) -> str:
        inner = self.op("Erf", [self.op("Div", [x, self.const(np.array(math.sqrt(2.0), np.float32))])])
        half = self.op("Mul", [x, self.const(np.array(0.5, np.float32))])
        return self.op("Mul", [half, self.op("Add", [inner, self.const(np.array(1.0, np.float32))])])

    def attention(self, x: str, seq: int, d: int, heads: int, mask: str | None = None) -> str:
        head = d // heads
        split = self.const(np.array([0, seq, heads, head], np.int64))
        def heads_of(t: str) -> str:
            return self.op("Transpose", [self.op("Reshape", [t, split])], perm=[0, 2, 1, 3])
        q, k, v = (heads_of(self.linear(x, d, d)) for _ in range(3))
        scores = self.op("MatMul", [q, self.op("Transpose", [k], perm=[0, 1, 3, 2])])
        scores = self.op("Mul", [scores, self.const(np.array(1.0 / math.sqrt(head), np.float32))])
        if mask is not None:
            scores = self.op("Add", [scores, mask])
        context = self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v])
        merged = self.op("Reshape", [self.op("Transpose", [context], perm=[0, 2, 1, 3]),
                                     self.const(np.array([0, seq, d], np.int64))])  # fmt: skip
        return self.linear(merged, d, d)

    def block(self, x: str, seq: int, d: int, heads: int, mask: str | None = None) -> str:
        x = self.op("Add", [x, self.attention(self.layernorm(x, d), seq, d, heads, mask)])
        hidden = self.gelu(self.linear(self.layernorm(x, d), d, 4 * d))
        return self.op("Add", [x, self.linear(hidden, 4 * d, d)])

    def model(self, output: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, [], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        typed = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
        model.graph.output.append(typed[output])  # the exporter's output type, symbolic batch included
        onnx.checker.check_model(model)
        return model


def resnet() -> onnx.ModelProto:
    b = Builder("resnet", 1)
    x = b.input("image", TensorProto.FLOAT, ["N", 3, 64, 64])
    x = b.op("Relu", [b.bn(b.conv(x, 3, 32, 7, stride=2), 32)])
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 32
    for cout, stride in ((32, 1), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1)):
        y = b.op("Relu", [b.bn(b.conv(x, cin, cout, 3, stride), cout)])
        y = b.bn(b.conv(y, cout, cout, 3), cout)
        skip = x if (cin == cout and stride == 1) else b.bn(b.conv(x, cin, cout, 1, stride), cout)
        x, cin = b.op("Relu", [b.op("Add", [y, skip])]), cout
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    return b.model(b.op("Gemm", [x, b.param((cin, 100)), b.param((100,), value=0.0)]))


def mobilenet() -> onnx.ModelProto:
    b = Builder("mobilenet", 2)
    x = b.input("image", TensorProto.FLOAT, ["N", 3, 64, 64])
    relu6 = {"min": 0.0, "max": 6.0}
    floor, ceil = b.const(np.array(relu6["min"], np.float32)), b.const(np.array(relu6["max"], np.float32))
    x = b.op("Clip", [b.bn(b.conv(x, 3, 16, 3, 2), 16), floor, ceil])
    cin = 16
    for cout, stride, expand in ((24, 2, 4), (24, 1, 4), (32, 2, 6), (32, 1, 6), (64, 2, 6), (96, 1, 6)):
        wide = cin * expand
        y = b.op("Clip", [b.bn(b.conv(x, cin, wide, 1), wide), floor, ceil])
        y = b.op("Clip", [b.bn(b.conv(y, wide, wide, 3, stride, group=wide), wide), floor, ceil])
        y = b.bn(b.conv(y, wide, cout, 1), cout)
        x, cin = (b.op("Add", [x, y]) if cin == cout and stride == 1 else y), cout
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    return b.model(b.op("Gemm", [x, b.param((cin, 100)), b.param((100,), value=0.0)]))


def encoder() -> onnx.ModelProto:
    b = Builder("transformer_encoder", 3)
    seq, d, vocab = 128, 256, 8000
    ids = b.input("tokens", TensorProto.INT64, ["N", seq])
    x = b.op("Add", [b.op("Gather", [b.param((vocab, d), 0.02), ids]), b.param((seq, d), 0.02)])
    for _ in range(4):
        x = b.block(x, seq, d, heads=4)
    pooled = b.op("ReduceMean", [b.layernorm(x, d)], axes=[1], keepdims=0)
    return b.model(b.linear(pooled, d, 2))


def decoder_lm() -> onnx.ModelProto:
    b = Builder("decoder_lm", 4)
    seq, d, vocab = 128, 256, 8000
    ids = b.input("tokens", TensorProto.INT64, ["N", seq])
    causal = np.triu(np.full((seq, seq), -1e4, np.float32), k=1)
    mask = b.const(causal)
    x = b.op("Add", [b.op("Gather", [b.param((vocab, d), 0.02), ids]), b.param((seq, d), 0.02)])
    for _ in range(4):
        x = b.block(x, seq, d, heads=4, mask=mask)
    logits = b.op("MatMul", [b.layernorm(x, d), b.param((d, vocab), 0.02)])
    return b.model(b.op("LogSoftmax", [logits], axis=-1))


def vit() -> onnx.ModelProto:
    b = Builder("vision_transformer", 5)
    d, patch, side = 192, 8, 64
    seq = (side // patch) ** 2
    x = b.input("image", TensorProto.FLOAT, ["N", 3, side, side])
    w = b.param((d, 3, patch, patch))
    x = b.op("Conv", [x, w], kernel_shape=[patch, patch], strides=[patch, patch])
    x = b.op("Transpose", [b.op("Reshape", [x, b.const(np.array([0, d, seq], np.int64))])], perm=[0, 2, 1])
    x = b.op("Add", [x, b.param((seq, d), 0.02)])
    for _ in range(4):
        x = b.block(x, seq, d, heads=3)
    pooled = b.op("ReduceMean", [b.layernorm(x, d)], axes=[1], keepdims=0)
    return b.model(b.op("Softmax", [b.linear(pooled, d, 100)], axis=-1))


def unet() -> onnx.ModelProto:
    b = Builder("unet", 6)
    x = b.input("image", TensorProto.FLOAT, ["N", 3, 64, 64])

    def double(t: str, cin: int, cout: int) -> str:
        t = b.op("Relu", [b.bn(b.conv(t, cin, cout, 3), cout)])
        return b.op("Relu", [b.bn(b.conv(t, cout, cout, 3), cout)])

    skips, cin = [], 3
    for cout in (16, 32, 64):
        x = double(x, cin, cout)
        skips.append((x, cout))
        x, cin = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2]), cout
    x, cin = double(x, cin, 128), 128
    for skip, cout in reversed(skips):
        up = b.op("ConvTranspose", [x, b.param((cin, cout, 2, 2))], kernel_shape=[2, 2], strides=[2, 2])
        x, cin = double(b.op("Concat", [up, skip], axis=1), 2 * cout, cout), cout
    return b.model(b.op("Sigmoid", [b.conv(x, cin, 1, 1, bias=True)]))


def recommender() -> onnx.ModelProto:
    b = Builder("mlp_recommender", 7)
    tables, rows, dim, dense = 8, 20000, 32, 16
    ids = b.input("sparse", TensorProto.INT64, ["N", tables])
    features = b.input("dense", TensorProto.FLOAT, ["N", dense])
    looked = [
        b.op("Gather", [b.param((rows, dim), 0.02), b.op("Gather", [ids, b.const(np.array(t, np.int64))], axis=1)])
        for t in range(tables)
    ]
    bottom = b.op("Relu", [b.linear(b.op("Relu", [b.linear(features, dense, 64)]), 64, dim)])
    x = b.op("Concat", [bottom, *looked], axis=1)
    width = dim * (tables + 1)
    for dout in (512, 256, 64):
        x, width = b.op("Relu", [b.linear(x, width, dout)]), dout
    return b.model(b.op("Sigmoid", [b.linear(x, width, 1)]))


def recurrent(kind: str) -> Callable[[], onnx.ModelProto]:
    gates = {"LSTM": 4, "GRU": 3}[kind]

    def build() -> onnx.ModelProto:
        b = Builder(f"{kind.lower()}_classifier", 8 + gates)
        seq, vocab, e, h = 64, 5000, 128, 256
        ids = b.input("tokens", TensorProto.INT64, ["N", seq])
        x = b.op("Transpose", [b.op("Gather", [b.param((vocab, e), 0.02), ids])], perm=[1, 0, 2])
        din = e
        for _ in range(2):
            w, r = b.param((1, gates * h, din)), b.param((1, gates * h, h))
            y = b.op(kind, [x, w, r, b.param((1, 2 * gates * h), value=0.0)], outputs=2 if kind == "GRU" else 3,
                     hidden_size=h)[0]  # fmt: skip
            x, din = b.op("Squeeze", [y, b.const(np.array([1], np.int64))]), h
        last = b.op("Gather", [x, b.const(np.array(seq - 1, np.int64))], axis=0)
        return b.model(b.op("Softmax", [b.linear(last, h, 10)], axis=-1))

    return build


@dataclass(frozen=True)
class Entry:
    family: str
    build: Callable[[], onnx.ModelProto]
    batches: tuple[int, ...]
    kind: str  # cnn, transformer or other: which the 30 % saving target covers


CORPUS: tuple[Entry, ...] = (
    Entry("resnet", resnet, (1, 8, 32), "cnn"),
    Entry("mobilenet", mobilenet, (1, 8, 32), "cnn"),
    Entry("unet", unet, (1, 4, 16), "cnn"),
    Entry("transformer_encoder", encoder, (1, 4, 16), "transformer"),
    Entry("decoder_lm", decoder_lm, (1, 4, 16), "transformer"),
    Entry("vision_transformer", vit, (1, 8, 32), "transformer"),
    Entry("mlp_recommender", recommender, (1, 64, 1024), "other"),
    Entry("lstm_classifier", recurrent("LSTM"), (1, 8, 32), "other"),
    Entry("gru_classifier", recurrent("GRU"), (1, 8, 32), "other"),
)


def feeds(model: onnx.ModelProto, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for ``batch``: images and dense features N(0, 1); token ids below the smallest table."""
    rng = np.random.default_rng(seed)
    rows = min((d.dims[0] for d in model.graph.initializer if len(d.dims) == 2 and d.dims[0] >= 1000), default=2)
    out: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        dims = [batch if not d.HasField("dim_value") else d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == TensorProto.INT64:
            out[value.name] = rng.integers(0, rows, size=dims, dtype=np.int64)
        else:
            out[value.name] = rng.standard_normal(dims).astype(np.float32)
    return out


def export(folder: Path) -> dict[str, Path]:
    """Write every corpus model to ``folder`` as FAMILY.onnx."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for entry in CORPUS:
        path = folder / f"{entry.family}.onnx"
        onnx.save(entry.build(), str(path))
        paths[entry.family] = path
    return paths
