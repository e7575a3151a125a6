"""TFLite's TFLite_Detection_PostProcess custom operator (ops_detection.py): exported, run
on the host (tests/c_runner.py) and compared with TFLite's kernel through ai_edge_litert:
the number of detections and the classes exactly, boxes and scores within 1e-5. Random
inputs, and inputs of few distinct values (equal scores, boxes that coincide or overlap)
for the order of ties and the suppression."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from flatbuffers import flexbuffers

from generator.errors import ExportError
from generator.export.api import export_model
from generator.export.tflite import survey
from generator.export.tflite.convert import Unsupported
from generator.export.tflite.model import read_tflite
from generator.export.tflite.ops_detection import read_options
from tests.c_runner import CModel
from tests.tflite_builder import Tensor, litert_missing, op_model, reference

needs_litert = pytest.mark.skipif(litert_missing() is not None, reason=str(litert_missing()))

CODE = "TFLite_Detection_PostProcess"
SAMPLES = 4


@dataclass
class Det:
    id: str
    anchors: int
    classes: int
    detections: int
    box_dtype: str = "float32"  # the encodings and anchors: float32 or uint8
    class_dtype: str = "float32"
    background: int = 1  # score columns before the classes
    ties: bool = False  # inputs of few distinct values
    options: dict = field(default_factory=dict)

    def opts(self) -> dict:
        o = {"max_detections": self.detections, "max_classes_per_detection": 1,
             "detections_per_class": 3, "use_regular_nms": False,
             "nms_score_threshold": 0.25, "nms_iou_threshold": 0.4,
             "num_classes": self.classes, "y_scale": 10.0, "x_scale": 10.0,
             "h_scale": 5.0, "w_scale": 5.0}
        o.update(self.options)
        return {k: v for k, v in o.items() if v is not None}  # None: left out

    @property
    def slots(self) -> int:
        return self.detections * self.opts()["max_classes_per_detection"]

    def model(self) -> bytes:
        n, columns = self.anchors, self.classes + self.background
        rng = np.random.default_rng(n * 31 + self.classes)
        if self.ties:  # a coarse grid of anchors: many coincide or overlap
            centers = rng.choice([0.3, 0.5, 0.7], (n, 2))
            sizes = rng.choice([0.25, 0.5], (n, 2))
        else:
            centers, sizes = rng.uniform(0.1, 0.9, (n, 2)), rng.uniform(0.05, 0.6, (n, 2))
        anchors = np.concatenate([centers, sizes], axis=1)
        if self.box_dtype == "uint8":
            boxes = Tensor((1, n, 4), "uint8", 0.05, 128)
            anchor_t = Tensor((n, 4), "uint8", 1 / 256, 0,
                              data=np.clip(np.round(anchors * 256), 0, 255))
        else:
            boxes = Tensor((1, n, 4), "float32")
            anchor_t = Tensor((n, 4), "float32", data=anchors)
        scores = (Tensor((1, n, columns), "uint8", 1 / 256, 3) if self.class_dtype == "uint8"
                  else Tensor((1, n, columns), "float32"))
        outs = [Tensor((1, self.slots, 4), "float32"), Tensor((1, self.slots), "float32"),
                Tensor((1, self.slots), "float32"), Tensor((1,), "float32")]
        return op_model("CUSTOM", [boxes, scores, anchor_t], outs, None, custom_code=CODE,
                        custom_options=bytes(flexbuffers.Dumps(self.opts())))

    def inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        shape_b = (1, self.anchors, 4)
        shape_s = (1, self.anchors, self.classes + self.background)
        if self.box_dtype == "uint8":
            pool = [128, 128, 140, 100] if self.ties else None
            boxes = (rng.choice(pool, shape_b) if pool else
                     rng.integers(60, 196, shape_b)).astype(np.uint8)
        else:
            boxes = (rng.choice([0.0, 0.0, 0.5, -0.5], shape_b) if self.ties else
                     rng.uniform(-2, 2, shape_b)).astype(np.float32)
        if self.class_dtype == "uint8":
            scores = (rng.choice([3, 100, 200, 250], shape_s) if self.ties else
                      rng.integers(0, 256, shape_s)).astype(np.uint8)
        else:
            scores = (rng.choice([0.1, 0.5, 0.8, 0.9], shape_s) if self.ties else
                      rng.uniform(0, 1, shape_s)).astype(np.float32)
        return [boxes, scores]


CASES = [
    Det("fast-float32", 100, 5, 10),
    Det("fast-uint8", 64, 4, 8, "uint8", "uint8"),
    Det("fast-uint8-boxes-float-scores", 20, 3, 5, "uint8", "float32", background=0),
    Det("fast-float-boxes-uint8-scores", 30, 3, 6, "float32", "uint8"),
    Det("fast-few-above-threshold", 40, 3, 10, options={"nms_score_threshold": 0.9}),
    Det("fast-ties-uint8", 60, 3, 8, "uint8", "uint8", ties=True),
    Det("fast-ties-float32", 50, 4, 10, ties=True, options={"nms_iou_threshold": 0.6}),
    Det("fast-3-classes-per-detection", 40, 5, 6, "uint8", "uint8", ties=True,
        options={"max_classes_per_detection": 3}),
    Det("fast-more-classes-per-detection-than-classes", 25, 3, 5,
        options={"max_classes_per_detection": 4}),
    Det("regular-float32", 50, 4, 8, options={"use_regular_nms": True}),
    Det("regular-uint8-default-per-class", 40, 3, 10, "uint8", "uint8",
        options={"use_regular_nms": True, "detections_per_class": None}),
    Det("regular-ties-uint8", 60, 5, 10, "uint8", "uint8", ties=True,
        options={"use_regular_nms": True, "detections_per_class": 4}),
    Det("regular-ties-float32", 30, 3, 7, ties=True, background=0,
        options={"use_regular_nms": True}),
]


def _written(case: Det, count: int) -> np.ndarray:
    """The output slots TFLite's kernel writes (its fast path leaves the rest as they were)."""
    o = case.opts()
    if o["use_regular_nms"]:
        return np.arange(case.slots)
    per, kept = o["max_classes_per_detection"], min(o["max_classes_per_detection"],
                                                   case.classes)
    return np.array([k * per + c for k in range(count) for c in range(kept)], int)


@needs_litert
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_detection_postprocess_equals_tflite(case: Det, tmp_path: Path) -> None:
    path = tmp_path / "model.tflite"
    path.write_bytes(case.model())
    model = CModel(export_model(path, tmp_path / "model.tar"), tmp_path)
    rng = np.random.default_rng(len(case.id))
    found = []
    for _ in range(SAMPLES):
        xs = case.inputs(rng)
        want = reference(path.read_bytes(), xs)
        got = model(*xs)
        assert [g.shape for g in got] == [w.shape for w in want]
        count = int(want[3][0])
        found.append(count)
        assert got[3][0] == want[3][0]
        slots = _written(case, count)
        np.testing.assert_array_equal(got[1][0, slots], want[1][0, slots])
        np.testing.assert_allclose(got[2][0, slots], want[2][0, slots], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[0][0, slots], want[0][0, slots], rtol=1e-5, atol=1e-6)
        rest = np.setdiff1d(np.arange(case.slots), slots)
        assert not got[0][0, rest].any() and not got[1][0, rest].any() \
            and not got[2][0, rest].any()
    assert max(found) > 0


def _refusal(tmp_path: Path, model: bytes) -> str:
    path = tmp_path / "model.tflite"
    path.write_bytes(model)
    with pytest.raises(ExportError) as err:
        export_model(path, tmp_path / "model.tar")
    return str(err.value)


def test_int8_inputs_are_refused(tmp_path: Path) -> None:
    # TFLite's kernel fails on int8 encodings and predictions: nothing to be exact with
    case = Det("int8", 10, 3, 5)
    opts = bytes(flexbuffers.Dumps(case.opts()))
    model = op_model("CUSTOM", [Tensor((1, 10, 4), "int8", 0.05, 0),
                                Tensor((1, 10, 4), "int8", 1 / 256, -128),
                                Tensor((10, 4), "float32", data=np.full((10, 4), 0.5))],
                     [Tensor((1, 5, 4), "float32"), Tensor((1, 5), "float32"),
                      Tensor((1, 5), "float32"), Tensor((1,), "float32")], None,
                     custom_code=CODE, custom_options=opts)
    message = _refusal(tmp_path, model)
    assert CODE in message and "float32 or uint8" in message


def _reason(model: bytes) -> str:
    """What our importer says of the model's one operator (a float model it refuses goes
    to TVM's frontend at export, so the importer is asked directly)."""
    (status,) = survey(read_tflite(model, "model.tflite"))
    assert status.code == CODE
    return status.reason if status.status == "unsupported" else ""


@pytest.mark.parametrize(("options", "reason"), [
    ({"nms_iou_threshold": 0.0}, "nms_iou_threshold 0.0"),
    ({"nms_iou_threshold": 1.5}, "nms_iou_threshold 1.5"),
    ({"max_detections": 0}, "must be positive"),
    ({"num_classes": 7}, "num_classes 7 with 4 score columns"),
    ({"use_regular_nms": True, "detections_per_class": 0}, "detections_per_class"),
    ({"h_scale": 0.0}, "zero box scale"),
    ({"y_scale": None}, "'y_scale' is missing"),
])
def test_options_tflite_rejects_are_refused(options: dict, reason: str) -> None:
    case = Det("refused", 10, 3, 5, options=options)
    assert reason in _reason(case.model())


def test_float_model_is_taken() -> None:
    assert _reason(Det("taken", 10, 3, 5).model()) == ""


def test_options_are_read_with_tflite_defaults() -> None:
    raw = bytes(flexbuffers.Dumps({
        "max_detections": 7, "max_classes_per_detection": 2, "nms_score_threshold": 0.1,
        "nms_iou_threshold": 0.6, "num_classes": 90, "y_scale": 10, "x_scale": 10.0,
        "h_scale": 5.0, "w_scale": 5.0}))
    o = read_options(raw)
    assert (o.max_detections, o.max_classes_per_detection, o.num_classes) == (7, 2, 90)
    assert o.detections_per_class == 100 and not o.use_regular_nms
    assert o.score_threshold == float(np.float32(0.1)) and o.scales == (10.0, 10.0, 5.0, 5.0)
    with pytest.raises(Unsupported, match="'max_classes_per_detection' is missing"):
        read_options(bytes(flexbuffers.Dumps({"max_detections": 1})))
    with pytest.raises(Unsupported):
        read_options(b"\x01\x02\x03")
