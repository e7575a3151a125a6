"""Int8 models of our own making for the memory plans (docs/memory.md): MobileNetV2-style
inverted residual blocks over a 96x96x3 input, built with tests/tflite_builder.py.

Weights are random (a seeded generator). Weights have a He-style gain and each tensor's
scale follows an estimate of its values' root mean square (inputs uniform over [-1, 1]), so
every layer's outputs spread over the int8 range and depend on the input instead of
saturating: what matters here is the tensors' shapes and lifetimes, and that every output
byte is TFLite's."""

from __future__ import annotations

import numpy as np

from tests.tflite_builder import ModelBuilder, Tensor

RELU6 = "RELU6"


class _Net:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.b = ModelBuilder("microtvm-gen MobileNetV2-style test model")
        self.n = 0

    def name(self, what: str) -> str:
        self.n += 1
        return f"{what}_{self.n}"

    def act(self, shape, scale: float, zero: int = 0, rms: float = 0.0) -> tuple:
        """(tensor, shape, scale, zero point, rms of its real values)."""
        t = self.b.tensor(Tensor(shape, "int8", float(scale), zero, name=self.name("act")))
        return t, tuple(shape), float(scale), zero, rms

    def _weights(self, shape, axis: int, in_scale: float, pre_rms: float, fan_in: int):
        channels = shape[axis]
        w = self.rng.integers(-127, 128, shape).astype(np.int8)
        # He-style gain: real weights of rms sqrt(2 / fan_in) (an int8 uniform's rms is
        # ~0.58 of 127), so a ReLU layer keeps its input's rms
        unit = np.sqrt(2.0 / fan_in) / (127 * 0.58)
        w_scale = [float(s) for s in self.rng.uniform(0.5, 1.5, channels) * unit]
        bias_scale = [in_scale * s for s in w_scale]
        # biases of a tenth of the sum's spread: the input, not the bias, decides the sign
        bias = np.array([self.rng.normal() * 0.1 * pre_rms / s for s in bias_scale])
        wt = self.b.tensor(Tensor(shape, "int8", w_scale, 0, axis, data=w,
                                  name=self.name("w")))
        bt = self.b.tensor(Tensor((channels,), "int32", bias_scale, 0, 0,
                                  data=np.round(bias).astype(np.int32), name=self.name("b")))
        return wt, bt

    def conv(self, x, cout: int, k: int = 1, stride: int = 1, act: str = RELU6,
             depthwise: bool = False, padding: str = "SAME", dilation: int = 1):
        t, (n, h, w, cin), scale, _, rms = x
        if padding == "SAME":
            oh, ow = -(-h // stride), -(-w // stride)
        else:
            extent = (k - 1) * dilation + 1
            oh, ow = (h - extent) // stride + 1, (w - extent) // stride + 1
        fan_in = k * k * (1 if depthwise else cin)
        pre_rms = rms * np.sqrt(2.0)
        if act == RELU6:  # the positive half: zero point -128
            out = self.act((n, oh, ow, cout), pre_rms / 40, -128, pre_rms / np.sqrt(2))
        else:
            out = self.act((n, oh, ow, cout), pre_rms / 32, 0, pre_rms)
        if depthwise:
            wt, bt = self._weights((1, k, k, cout), 3, scale, pre_rms, fan_in)
            self.b.op("DEPTHWISE_CONV_2D", [t, wt, bt], [out[0]], {
                "padding": padding, "stride_w": stride, "stride_h": stride,
                "dilation_w_factor": dilation, "dilation_h_factor": dilation,
                "depth_multiplier": cout // cin, "fused_activation_function": act})
        else:
            wt, bt = self._weights((cout, k, k, cin), 0, scale, pre_rms, fan_in)
            self.b.op("CONV_2D", [t, wt, bt], [out[0]], {
                "padding": padding, "stride_w": stride, "stride_h": stride,
                "dilation_w_factor": dilation, "dilation_h_factor": dilation,
                "fused_activation_function": act})
        return out

    def add(self, a, b):
        rms = float(np.hypot(a[4], b[4]))
        out = self.act(a[1], rms / 32, 0, rms)
        self.b.op("ADD", [a[0], b[0]], [out[0]], {"fused_activation_function": "NONE"})
        return out

    def block(self, x, expansion: int, cout: int, stride: int):
        cin = x[1][3]
        y = self.conv(x, cin * expansion) if expansion != 1 else x
        y = self.conv(y, cin * expansion, k=3, stride=stride, depthwise=True)
        y = self.conv(y, cout, act="NONE")
        return self.add(x, y) if stride == 1 and cin == cout else y


def global_pool(net: _Net, y) -> tuple:
    """AVERAGE_POOL_2D over the whole of y, then RESHAPE to (n, c): the flat tensor."""
    _, (n, h, w, c), scale, zero, rms = y
    pooled = net.act((n, 1, 1, c), scale, zero, rms)
    net.b.op("AVERAGE_POOL_2D", [y[0]], [pooled[0]], {
        "padding": "VALID", "stride_w": 1, "stride_h": 1, "filter_width": w,
        "filter_height": h, "fused_activation_function": "NONE"})
    flat = net.act((n, c), scale, zero, rms)
    shape = net.b.tensor(Tensor((2,), "int32", data=np.array([n, c], np.int32),
                                name="flat_shape"))
    net.b.op("RESHAPE", [pooled[0], shape], [flat[0]], {"new_shape": [n, c]})
    return flat


def mobilenet_v2_style(seed: int = 0) -> bytes:
    """96x96x3 → conv 3x3/2 (16) → inverted residual blocks (expansion 6 after the first;
    stride-2 stages of 16, 24 and 32 channels, with residual repeats) → 1x1 conv (64) →
    global average pool → fully connected (10)."""
    net = _Net(seed)
    x = net.act((1, 96, 96, 3), 1 / 128.0, 0, 0.58)
    net.b.inputs(x[0])
    y = net.conv(x, 16, k=3, stride=2)
    y = net.block(y, 1, 8, 1)
    for cout, stride in ((16, 2), (16, 1), (24, 2), (24, 1), (32, 2), (32, 1)):
        y = net.block(y, 6, cout, stride)
    y = net.conv(y, 64)
    flat = global_pool(net, y)
    _, (n, c), scale, _, rms = flat
    fc_w = net.b.tensor(Tensor((10, c), "int8", 1 / 127.0, 0,
                               data=net.rng.integers(-127, 128, (10, c)).astype(np.int8),
                               name="fc_w"))
    fc_b = net.b.tensor(Tensor((10,), "int32", scale / 127.0, 0,
                               data=np.zeros(10, np.int32), name="fc_b"))
    # the pool averages the input's differences away: the logits get a finer scale
    logits = net.act((n, 10), rms * 0.58 * np.sqrt(c) / 256, 0)
    net.b.op("FULLY_CONNECTED", [flat[0], fc_w, fc_b], [logits[0]],
             {"fused_activation_function": "NONE"})
    net.b.outputs(logits[0])
    return net.b.build()


def conv_chain_style(seed: int = 1) -> bytes:
    """A run of convolutions of every geometry a chain takes, each read only by the next,
    whose middle tensors are the largest (so `--memory small` computes them as one chain):
    32x32x4 → conv 3x3 (32, ReLU6) → depthwise 3x3 dilation 2 → depthwise 5x5 stride 2,
    multiplier 2 → conv 3x3 VALID, stride 1 (8, no activation) → global average pool."""
    net = _Net(seed)
    x = net.act((1, 32, 32, 4), 1 / 128.0, 0, 0.58)
    net.b.inputs(x[0])
    y = net.conv(x, 32, k=3)
    y = net.conv(y, 32, k=3, depthwise=True, dilation=2)
    y = net.conv(y, 64, k=5, stride=2, depthwise=True)
    y = net.conv(y, 8, k=3, padding="VALID", act="NONE")
    _, (n, h, w, c), scale, zero, rms = y
    pooled = net.act((n, 1, 1, c), scale, zero, rms)
    net.b.op("AVERAGE_POOL_2D", [y[0]], [pooled[0]], {
        "padding": "VALID", "stride_w": 1, "stride_h": 1, "filter_width": w,
        "filter_height": h, "fused_activation_function": "NONE"})
    net.b.outputs(pooled[0])
    return net.b.build()
