"""MLPerf-Tiny-style int8 models of our own making, for the speed comparisons against
TFLite Micro + CMSIS-NN (benchmarks/cores.py) and the arm-dsp kernels' end-to-end tests:

- `mobilenet_v1_style`: MobileNet-v1, width 0.25, 96x96x3 (the visual wake words model's
  shape): a 3x3/2 convolution, thirteen depthwise-separable blocks, average pool, two classes;
- `resnet8_style`: ResNet-8 on 32x32x3 (the image classification model's shape), from
  tests/tflite_models.py's `resnet_model` with widths 16, 32, 64;
- `autoencoder_style`: the anomaly detection model's dense autoencoder, 640 → 128 (x4) → 8 →
  128 (x4) → 640, ReLU between.

Weights are random (seeded) with scales that follow each tensor's values (tests/memory_models.py
says how), so every layer's outputs spread over the int8 range."""

from __future__ import annotations

import numpy as np

from tests.memory_models import RELU6, _Net, global_pool
from tests.tflite_builder import Tensor
from tests.tflite_models import resnet_model

MOBILENET_V1_BLOCKS = ((16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1),
                       (128, 1), (128, 1), (128, 1), (128, 1), (256, 2), (256, 1))
AUTOENCODER_WIDTHS = (128, 128, 128, 128, 8, 128, 128, 128, 128)


def _pool_and_classify(net: _Net, y, classes: int) -> None:
    flat = global_pool(net, y)
    _, (_, c), _, _, rms = flat
    logits = _dense(net, flat, classes, "NONE", spread=rms * 0.58 * np.sqrt(c) / 256)
    net.b.outputs(logits[0])


def _dense(net: _Net, x, units: int, act: str, spread: float | None = None):
    t, (n, k), scale, _, rms = x
    pre_rms = rms * np.sqrt(2.0)
    if spread is not None:
        out = net.act((n, units), spread, 0, spread * 32)
    elif act == "RELU":
        out = net.act((n, units), pre_rms / 40, -128, pre_rms / np.sqrt(2))
    else:
        out = net.act((n, units), pre_rms / 32, 0, pre_rms)
    w = net.rng.integers(-127, 128, (units, k)).astype(np.int8)
    unit = np.sqrt(2.0 / k) / (127 * 0.58)
    wt = net.b.tensor(Tensor((units, k), "int8", float(unit), 0, data=w, name=net.name("w")))
    bias = np.round(net.rng.normal(size=units) * 0.1 * pre_rms / (scale * unit))
    bt = net.b.tensor(Tensor((units,), "int32", scale * float(unit), 0,
                             data=bias.astype(np.int32), name=net.name("b")))
    net.b.op("FULLY_CONNECTED", [t, wt, bt], [out[0]], {"fused_activation_function": act})
    return out


def mobilenet_v1_style(seed: int = 0) -> bytes:
    """96x96x3 → conv 3x3/2 (8) → 13 x (depthwise 3x3 + pointwise), widths 16 … 256
    (MobileNet-v1 x 0.25) → global average pool → fully connected (2)."""
    net = _Net(seed)
    x = net.act((1, 96, 96, 3), 1 / 128.0, 0, 0.58)
    net.b.inputs(x[0])
    y = net.conv(x, 8, k=3, stride=2)
    for cout, stride in MOBILENET_V1_BLOCKS:
        y = net.conv(y, y[1][3], k=3, stride=stride, depthwise=True)
        y = net.conv(y, cout, act=RELU6)
    _pool_and_classify(net, y, 2)
    return net.b.build()


def resnet8_style(seed: int = 0) -> bytes:
    """ResNet-8 on 32x32x3: tests/tflite_models.py's resnet_model, widths 16, 32, 64."""
    model, _ = resnet_model(np.random.default_rng(seed), size=32, widths=(16, 32, 64))
    return model


def autoencoder_style(seed: int = 0) -> bytes:
    """640 → dense 128, 128, 128, 128, 8, 128, 128, 128, 128 (ReLU) → dense 640."""
    net = _Net(seed)
    x = net.act((1, 640), 1 / 64.0, 0, 1.0)
    net.b.inputs(x[0])
    y = x
    for units in AUTOENCODER_WIDTHS:
        y = _dense(net, y, units, "RELU")
    y = _dense(net, y, 640, "NONE")
    net.b.outputs(y[0])
    return net.b.build()


MODELS = {"mobilenet_v1_025": mobilenet_v1_style, "resnet8": resnet8_style,
          "autoencoder": autoencoder_style}
