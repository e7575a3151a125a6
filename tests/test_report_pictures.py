"""The pictures of `microtvm-gen report` (generator/report/pictures.py): the SVG memory map,
the SVG per-layer profile and the HTML page, drawn from report dicts built here (a kws-like
firmware, a host program, hostile names, 200 layers). No model, no build: fast."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from itertools import pairwise

import pytest

from generator.report import pictures
from generator.report.model import Block, Layer, RegionUse, StackBound, TensorUse

SVG = "{http://www.w3.org/2000/svg}"
KIB = 1024
MIB = 1024 * 1024
HOSTILE = "<script>alert(1)</script> & \"quoted\" 'single' </title><b>"

# -- Report dicts ---------------------------------------------------------------------------

# kws (DS-CNN keyword spotting, int8): (kernel, operators, input shape, output shape, MACs,
# weights bytes, implementation, code bytes).
KWS_LAYERS = [
    ("q_conv2d", ["conv2d", "add", "relu"], [1, 49, 10, 1], [1, 25, 5, 64], 320_000, 2_816,
     "ours", 812),
    ("q_depthwise_conv2d", ["depthwise_conv2d", "add", "relu"], [1, 25, 5, 64],
     [1, 25, 5, 64], 72_000, 832, "cmsis-nn", 640),
    ("q_conv2d1", ["conv2d", "add", "relu"], [1, 25, 5, 64], [1, 25, 5, 64], 512_000, 4_352,
     "cmsis-nn", 588),
    ("q_depthwise_conv2d", ["depthwise_conv2d", "add", "relu"], [1, 25, 5, 64],
     [1, 25, 5, 64], 72_000, 832, "cmsis-nn", 640),
    ("q_conv2d1", ["conv2d", "add", "relu"], [1, 25, 5, 64], [1, 25, 5, 64], 512_000, 4_352,
     "cmsis-nn", 588),
    ("q_depthwise_conv2d", ["depthwise_conv2d", "add", "relu"], [1, 25, 5, 64],
     [1, 25, 5, 64], 72_000, 832, "cmsis-nn", 640),
    ("q_conv2d1", ["conv2d", "add", "relu"], [1, 25, 5, 64], [1, 25, 5, 64], 512_000, 4_352,
     "cmsis-nn", 588),
    ("q_depthwise_conv2d", ["depthwise_conv2d", "add", "relu"], [1, 25, 5, 64],
     [1, 25, 5, 64], 72_000, 832, "cmsis-nn", 640),
    ("q_conv2d1", ["conv2d", "add", "relu"], [1, 25, 5, 64], [1, 25, 5, 64], 512_000, 4_352,
     "cmsis-nn", 588),
    ("q_avg_pool2d", ["avg_pool2d"], [1, 25, 5, 64], [1, 1, 1, 64], 8_000, 0, "ours", 208),
    ("q_dense", ["reshape", "dense", "add"], [1, 1, 1, 64], [1, 12], 768, 816,
     "accelerator:ethos-u55", 164),
    ("q_softmax", ["softmax"], [1, 12], [1, 12], 0, 0, "ours", 420),
]
KWS_PROFILE_INSTRUCTIONS = [812_345, 301_220, 1_712_004, 301_220, 1_712_004, 301_220,
                            1_712_004, 301_220, 1_712_004, 40_112, 9_876, 3_310]


def kws_layers(profile: bool = False) -> list[dict]:
    """The 12 calls of kws's run function, with a profile when asked."""
    total = sum(KWS_PROFILE_INSTRUCTIONS)
    layers = []
    for index, (kernel, ops, in_shape, out_shape, macs, weights, impl, code) in enumerate(
            KWS_LAYERS):
        source = (TensorUse(in_shape, "int8", "input", _elements(in_shape), "input 'input_1'")
                  if index == 0 else
                  TensorUse(in_shape, "int8", "activation", _elements(in_shape),
                            f"pool+{8000 * (index % 2)}"))
        inputs = [source] + ([TensorUse([64], "int32", "constant", 256, f"constant {index}")]
                             if weights else [])
        outputs = [TensorUse(out_shape, "int8", "output" if index == 11 else "activation",
                             _elements(out_shape), "output 'Identity'" if index == 11
                             else f"pool+{8000 * ((index + 1) % 2)}")]
        layer = Layer(index, kernel, ops, inputs, outputs, macs, weights, impl, code)
        if profile:
            count = KWS_PROFILE_INSTRUCTIONS[index]
            layer.profile = {"instructions": count, "share": count / total}
        layers.append(layer.to_json())
    return layers


def _elements(shape: list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def kws_regions(flash_bytes: int, ram_bytes: int) -> list[dict]:
    """FLASH and RAM of a kws firmware: addressed blocks, kernels without an address, a 24 B
    and an 8 B block among them."""
    flash = RegionUse("FLASH", "flash", 0x0800_0000, flash_bytes, sections={
        ".isr_vector": 456, ".text": 9_996, ".rodata": 27_864, ".ARM.exidx": 8})
    flash.blocks = [
        Block("vectors + main", "app", 2_112, 0x0800_0000, "app/main.c, platform/startup.c"),
        Block("runtime", "runtime", 1_536, 0x0800_0840, "runtime/src: mtvg_run, the arena"),
        Block("run function", "model-code", 1_020, 0x0800_0E40, "tvmgen_default_run"),
        Block("weights", "weights", 27_248, 0x0800_1240, "the model's constants (38 arrays)"),
        Block("libc", "startup-libc", 3_900, 0x0800_7CB0, "newlib-nano memcpy, printf"),
        Block(".ARM.exidx", "other", 8, 0x0800_8BEC, "unwind index"),
    ] + [Block(kernel, "kernel-code", code, None, f"{kernel}: {', '.join(ops)}")
         for kernel, ops, *_, code in _unique_kernels()] + [
        Block("q_reshape", "kernel-code", 24, None, "q_reshape: reshape")]
    ram = RegionUse("RAM", "ram", 0x2000_0000, ram_bytes, sections={
        ".data": 120, ".bss": 9_610})
    ram.blocks = [
        Block("activations", "activations", 8_000, 0x2000_0000, "the model's pool (2 buffers)"),
        Block("input", "io", 490, 0x2000_1F40, "input 'input_1' int8 1×49×10×1"),
        Block("output", "io", 12, 0x2000_2130, "output 'Identity' int8 1×12"),
        Block("libc data", "startup-libc", 1_132, 0x2000_2140, ".data and .bss of newlib"),
        Block("runtime state", "runtime", 96, 0x2000_25AC, "mtvg_run's state"),
        Block("stack", "stack", 32_768, 0x2000_0000 + ram_bytes - 32_768,
              "the linker script's reservation"),
    ]
    return [flash.to_json(), ram.to_json()]


def _unique_kernels() -> list[tuple]:
    seen: dict[str, tuple] = {}
    for layer in KWS_LAYERS:
        seen.setdefault(layer[0], layer)
    return list(seen.values())


def report_of(regions: list[dict], layers: list[dict], stack: dict, *, board: str,
              project: str = "/tmp/x/kws", estimate: bool = False) -> dict:
    """A whole report dict, its totals summed as the report command sums them."""
    return {
        "project": project, "board": board, "module": "default", "estimate": estimate,
        "regions": regions, "layers": layers, "stack": stack,
        "totals": {
            "flash": sum(r["used"] for r in regions if r["kind"] == "flash"),
            "ram": sum(r["used"] for r in regions if r["kind"] in ("ram", "host")),
            "macs": sum(la["macs"] or 0 for la in layers),
            "weights_bytes": sum(la["weights_bytes"] for la in layers)},
    }


def kws_report(profile: bool = False, estimate: bool = False, flash_bytes: int = 1 * MIB,
               board: str = "nucleo-f746zg") -> dict:
    stack = StackBound(1_234, 32_768, ["Reset_Handler", "main", "mtvg_run",
                                       "tvmgen_default_run", "q_conv2d", "memset"])
    return report_of(kws_regions(flash_bytes, 320 * KIB), kws_layers(profile),
                     stack.to_json(), board=board, estimate=estimate)


def host_report() -> dict:
    """A host program: one region without a size, an unbounded stack, no MACs."""
    region = RegionUse("memory", "host", 0, None, sections={".text": 30_000, ".bss": 9_000})
    region.blocks = [Block("weights", "weights", 27_248, None, "the model's constants"),
                     Block("kernels", "kernel-code", 3_000, None, "12 kernels"),
                     Block("activations", "activations", 8_000, None, "the pool"),
                     Block("runtime", "runtime", 1_000, None, "runtime/src")]
    layers = kws_layers()
    for layer in layers:
        layer["macs"] = None  # an older archive
    stack = StackBound(None, None, [], "recursion through qsort's comparison callback")
    return report_of([region.to_json()], layers, stack.to_json(), board="host",
                     project="/tmp/x/kws-host")


def hostile_report() -> dict:
    """Every text a model or a user can choose, set to markup."""
    report = kws_report(profile=True)
    report["project"] = f"/tmp/{HOSTILE}"
    report["module"] = HOSTILE
    for region in report["regions"]:
        region["sections"] = {HOSTILE: 10}
        for block in region["blocks"]:
            block["label"] = f"{block['label']} {HOSTILE}"
            block["detail"] = HOSTILE
    for layer in report["layers"]:
        layer["kernel"] = f"{layer['kernel']}{HOSTILE}"
        layer["operators"] = [HOSTILE, "relu"]
        layer["implementation"] = HOSTILE
        for tensor in layer["inputs"] + layer["outputs"]:
            tensor["where"] = f"input '{HOSTILE}'"
            tensor["dtype"] = HOSTILE
    report["stack"]["path"] = ["main", HOSTILE]
    report["stack"]["reason"] = HOSTILE
    return report


def many_layers_report(count: int) -> dict:
    layers = []
    for index in range(count):
        shape = [1, 8 + index % 5, 8, 16]
        tensor = TensorUse(shape, "int8", "activation", _elements(shape), f"pool+{index * 64}")
        layers.append(Layer(index, f"q_conv2d{index}", ["conv2d", "add", "clip"], [tensor],
                            [tensor], 1_000 * (index % 17 + 1), 144 * (index % 3),
                            "ours", 300).to_json())
    report = kws_report()
    report["layers"] = layers
    return report


REPORTS = {
    "kws": kws_report,
    "kws-profiled": lambda: kws_report(profile=True),
    "kws-4mib-estimate": lambda: kws_report(estimate=True, flash_bytes=4 * MIB,
                                            board="mps2-an385-like"),
    "host": host_report,
    "hostile": hostile_report,
    "200-layers": lambda: many_layers_report(200),
    "1-layer": lambda: many_layers_report(1),
}

# -- Reading the pictures back --------------------------------------------------------------


def parse_svg(svg: str) -> ET.Element:
    """The SVG's root, after checking it is an SVG with a size and a viewBox."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    width, height = float(root.get("width")), float(root.get("height"))
    assert width > 0 and height > 0
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}"
    return root


def groups(root: ET.Element, klass: str) -> list[ET.Element]:
    """<g> elements whose class list has `klass`."""
    return [g for g in root.iter(f"{SVG}g") if klass in (g.get("class") or "").split()]


def title_of(element: ET.Element) -> str:
    found = element.find(f"{SVG}title")
    assert found is not None, f"no <title> in {ET.tostring(element)[:200]!r}"
    return found.text or ""


def block_rects(root: ET.Element) -> list[list[ET.Element]]:
    """Per region, in drawing order, the rects of its blocks (groups included)."""
    regions: list[list[ET.Element]] = []
    for element in root.iter():
        if element.tag == f"{SVG}g" and element.get("class") == "region-heading":
            regions.append([])
        if element.tag == f"{SVG}rect" and element.get("data-label") is not None:
            regions[-1].append(element)
    return regions


def texts(root: ET.Element, klass: str) -> list[ET.Element]:
    return [t for t in root.iter(f"{SVG}text") if t.get("class") == klass]


# -- The memory map -------------------------------------------------------------------------


@pytest.mark.parametrize("name", REPORTS)
def test_memory_map_parses_and_every_block_has_a_title_with_its_bytes(name):
    report = REPORTS[name]()
    root = parse_svg(pictures.memory_svg(report))
    titles = [title_of(g) for g in groups(root, "block")]
    for region in report["regions"]:
        for block in region["blocks"]:
            assert any(block["label"] in t and f"{block['bytes']:,} B" in t for t in titles), \
                block
    heading = "".join(root.itertext())
    for region in report["regions"]:
        assert region["name"] in heading


@pytest.mark.parametrize("name", ["kws", "kws-4mib-estimate", "host"])
def test_block_widths_are_proportional_to_bytes(name):
    report = REPORTS[name]()
    root = parse_svg(pictures.memory_svg(report))
    for rects in block_rects(root):
        exact = [r for r in rects if r.get("data-to-scale") == "yes"]
        assert len(exact) >= 3
        widths = [float(r.get("width")) for r in exact]
        counts = [int(r.get("data-bytes")) for r in exact]
        scale = sum(widths) / sum(counts)
        for width, count in zip(widths, counts, strict=True):
            assert width == pytest.approx(count * scale, abs=0.011)
        for r in rects:  # widened ones: the minimum, and still under their share
            assert float(r.get("width")) >= pictures.MIN_BLOCK_PX - 0.005
        # The blocks are laid side by side in address order, from the bar's left end.
        xs = [float(r.get("x")) for r in rects]
        assert xs[0] == pictures.MARGIN and xs == sorted(xs)


def test_a_4mib_region_holding_38kib_shows_readable_blocks_and_the_truth_in_a_gauge():
    report = kws_report(flash_bytes=4 * MIB)
    root = parse_svg(pictures.memory_svg(report))
    flash = block_rects(root)[0]
    weights = next(r for r in flash if r.get("data-label") == "weights")
    assert float(weights.get("width")) > 400  # to scale in 4 MiB it would be 6 px
    labels = [t.text for t in texts(root, "block-label")]
    assert "weights" in labels and "libc" in labels
    free = groups(root, "free")[0]
    used = report["regions"][0]["used"]
    assert f"{4 * MIB - used:,} B" in title_of(free)
    assert "not to scale" in "".join(free.itertext())
    gauge = groups(root, "gauge")[0]
    used_rect = gauge.findall(f"{SVG}rect")[1]
    assert float(used_rect.get("width")) == pytest.approx(
        pictures.BAR_WIDTH * used / (4 * MIB), abs=0.01)


def test_small_blocks_are_grouped_or_widened_and_still_listed():
    report = kws_report()
    root = parse_svg(pictures.memory_svg(report))
    small = [g for g in groups(root, "block")
             if float(g.find(f"{SVG}rect").get("width")) <= pictures.MIN_BLOCK_PX + 0.005]
    assert small, "the 8 B and 24 B blocks are drawn at the minimum width"
    listed = "\n".join(title_of(g) for g in small)
    assert "q_reshape" in listed and "24 B" in listed
    assert ".ARM.exidx" in listed and "8 B" in listed


def test_neighbouring_tiny_blocks_become_one_group_listing_them():
    region = RegionUse("RAM", "ram", 0x2000_0000, 64 * KIB)
    region.blocks = [Block("activations", "activations", 60_000, 0x2000_0000)]
    region.blocks += [Block(f"v{i}", "io", 4, 0x2000_F000 + 4 * i, f"variable {i}")
                      for i in range(50)]
    report = report_of([region.to_json()], [], StackBound(None, None).to_json(), board="b")
    root = parse_svg(pictures.memory_svg(report))
    (group,) = groups(root, "group")
    hover = title_of(group)
    assert hover.startswith("50 small blocks — 200 B")
    assert "v0: 4 B" in hover and "v39: 4 B" in hover and "… and 10 more" in hover


def test_a_host_region_is_scaled_to_its_used_bytes():
    report = host_report()
    root = parse_svg(pictures.memory_svg(report))
    (rects,) = block_rects(root)
    assert sum(float(r.get("width")) for r in rects) == pytest.approx(pictures.BAR_WIDTH,
                                                                      abs=0.05)
    assert not groups(root, "free")
    assert "no fixed size" in "".join(root.itertext())


def test_an_overflowing_region_is_marked():
    region = RegionUse("RAM", "ram", 0x2000_0000, 16 * KIB)
    region.blocks = [Block("activations", "activations", 20_000, 0x2000_0000),
                     Block("stack", "stack", 2_048, None)]
    report = report_of([region.to_json()], [], StackBound(512, 2_048).to_json(), board="b")
    svg = pictures.memory_svg(report)
    root = parse_svg(svg)
    assert "over by 5,664 B" in "".join(root.itertext())
    line = groups(root, "overflow")[0].find(f"{SVG}line")
    assert float(line.get("x1")) == pytest.approx(
        pictures.MARGIN + pictures.BAR_WIDTH * 16 * KIB / 22_048, abs=0.01)
    assert "over by" in pictures.html_page(report)


def test_the_stack_block_shows_its_bound():
    root = parse_svg(pictures.memory_svg(kws_report()))
    stack = next(g for g in groups(root, "block") if g.get("data-category") == "stack")
    assert "deepest use (bound): 1,234 B" in title_of(stack)
    (mark,) = [r for r in stack.iter(f"{SVG}rect") if r.get("class") == "stack-bound"]
    block = stack.find(f"{SVG}rect")
    assert float(mark.get("width")) == pytest.approx(
        float(block.get("width")) * 1_234 / 32_768, abs=0.01)


def test_the_legend_names_the_categories_present():
    root = parse_svg(pictures.memory_svg(host_report()))
    legend = [t.text for t in texts(root, "legend")]
    assert legend[:4] == ["weights", "kernel-code", "runtime", "activations"]
    assert "stack" not in legend


# -- The per-layer profile ------------------------------------------------------------------


@pytest.mark.parametrize("name", REPORTS)
def test_every_layer_has_a_title_with_shapes_dtypes_macs_and_implementation(name):
    report = REPORTS[name]()
    root = parse_svg(pictures.layers_svg(report))
    rows = groups(root, "layer")
    assert len(rows) == len(report["layers"])
    for row, layer in zip(rows, report["layers"], strict=True):
        hover = title_of(row)
        assert hover.startswith(f"#{layer['index']} {layer['kernel']}")
        if layer["macs"] is not None:
            assert f"MACs: {layer['macs']:,}" in hover
        assert f"weights: {layer['weights_bytes']:,} B" in hover
        assert f"implementation: {layer['implementation']}" in hover
        for tensor in layer["inputs"] + layer["outputs"]:
            assert f"{tensor['dtype']} {pictures.shape_text(tensor['shape'])}" in hover


def _bar_widths(root: ET.Element, klass: str) -> list[float]:
    return [float(r.get("width")) for r in root.iter(f"{SVG}rect") if r.get("class") == klass]


def test_bars_follow_macs_without_a_profile():
    report = kws_report()
    root = parse_svg(pictures.layers_svg(report))
    widths = _bar_widths(root, "layer-bar")
    macs = [layer["macs"] for layer in report["layers"]]
    scale = max(widths) / max(macs)
    for width, count in zip(widths, macs, strict=True):
        assert width == pytest.approx(count * scale, abs=0.011) or (count and width == 1.0)
    assert not _bar_widths(root, "macs-bar")
    values = [t.text for t in texts(root, "layer-value")]
    assert values[2] == f"512,000 MACs · {512_000 / report['totals']['macs'] * 100:.1f} %"


def test_bars_follow_the_profile_share_with_a_thin_macs_bar():
    report = kws_report(profile=True)
    root = parse_svg(pictures.layers_svg(report))
    widths = _bar_widths(root, "layer-bar")
    shares = [layer["profile"]["share"] for layer in report["layers"]]
    scale = max(widths) / max(shares)
    for width, share in zip(widths, shares, strict=True):
        assert width == pytest.approx(share * scale, abs=0.011) or width == 1.0
    macs_widths = _bar_widths(root, "macs-bar")
    assert len(macs_widths) == 12 and macs_widths[2] == max(macs_widths)
    values = [t.text for t in texts(root, "layer-value")]
    assert values[0] == f"{shares[0] * 100:.1f} % · 812,345 instructions"
    assert [t.text for t in texts(root, "macs-value")][2] == "512,000 MACs"


def test_a_profile_in_nanoseconds_without_share():
    report = kws_report()
    for layer, ns in zip(report["layers"], [1_500_000, 500_000] + [0] * 10, strict=True):
        layer["profile"] = {"ns": ns}
    root = parse_svg(pictures.layers_svg(report))
    values = [t.text for t in texts(root, "layer-value")]
    assert values[0] == "75.0 % · 1.5 ms" and values[1] == "25.0 % · 500 µs"


@pytest.mark.parametrize("count", [1, 200])
def test_rows_grow_with_the_layers_and_texts_do_not_overlap(count):
    root = parse_svg(pictures.layers_svg(many_layers_report(count)))
    for klass in ("layer-label", "layer-index", "layer-value"):
        ys = [float(t.get("y")) for t in texts(root, klass)]
        assert len(ys) == count
        assert all(b - a >= pictures.LAYER_FONT + 4 for a, b in pairwise(ys))
    assert float(root.get("height")) >= count * pictures.ROW_HEIGHT
    labels = texts(root, "layer-label")
    # Labels end before the bars start (their width is estimated generously).
    for label in labels:
        assert pictures.LABEL_X + pictures.text_width(label.text, pictures.LAYER_FONT) \
            <= pictures.LAYER_BAR_X


def test_profile_rows_keep_the_two_numbers_apart():
    root = parse_svg(pictures.layers_svg(kws_report(profile=True)))
    for value, macs in zip(texts(root, "layer-value"), texts(root, "macs-value"), strict=True):
        assert float(macs.get("y")) - float(value.get("y")) >= pictures.SMALL_FONT


def test_long_names_are_shortened_in_the_picture_and_whole_in_the_hover():
    report = many_layers_report(1)
    report["layers"][0]["kernel"] = "q_" + "very_long_kernel_name_" * 8
    root = parse_svg(pictures.layers_svg(report))
    (label,) = texts(root, "layer-label")
    assert label.text.endswith("…") and len(label.text) < 60
    assert report["layers"][0]["kernel"] in title_of(groups(root, "layer")[0])


def test_no_layers_still_draws_a_picture():
    report = kws_report()
    report["layers"] = []
    assert "no layers" in "".join(parse_svg(pictures.layers_svg(report)).itertext())


# -- Hostile names --------------------------------------------------------------------------


def test_hostile_names_never_become_markup():
    report = hostile_report()
    for picture in (pictures.memory_svg(report), pictures.layers_svg(report)):
        assert "<script" not in picture and "<b>" not in picture
        root = parse_svg(picture)
        # Shown as text, not dropped: the hovers hold the name as written.
        assert any(HOSTILE in (t.text or "") for t in root.iter(f"{SVG}title"))
    page = pictures.html_page(report)
    assert "<script" not in page.lower() and "<b>alert" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") > 20
    assert_well_formed(page)


def test_characters_xml_forbids_are_replaced():
    report = kws_report()
    report["regions"][0]["blocks"][0]["label"] = "bad\x00\x1b\ud800name"
    root = parse_svg(pictures.memory_svg(report))
    assert any("bad\ufffd\ufffd\ufffdname" in title_of(g) for g in groups(root, "block"))
    pictures.html_page(report).encode("utf-8")


# -- The HTML page --------------------------------------------------------------------------

VOID_ELEMENTS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
                 "source", "track", "wbr"}


class TagChecker(HTMLParser):
    """Every element opened is closed, in order (void elements and <x/> aside)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.errors: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in VOID_ELEMENTS:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.open[-1:] or 'nothing'}")
        else:
            self.open.pop()


def assert_well_formed(page: str) -> TagChecker:
    checker = TagChecker()
    checker.feed(page)
    checker.close()
    assert not checker.errors, checker.errors[:5]
    assert not checker.open, f"unclosed: {checker.open}"
    return checker


class TableReader(HTMLParser):
    """The cells of every table: {class: [[(text, data-value), ...] per row]}."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[tuple[str, list[list[tuple[str, str | None]]]]] = []
        self.cell: list[str] | None = None
        self.value: str | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "table":
            self.tables.append((attributes.get("class") or "", []))
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self.cell, self.value = [], attributes.get("data-value")
        elif tag == "li" and self.cell is not None and self.cell:
            self.cell.append("\n")

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][1][-1].append(("".join(self.cell).strip(), self.value))
            self.cell = None


def read_tables(page: str) -> list[tuple[str, list[list[tuple[str, str | None]]]]]:
    reader = TableReader()
    reader.feed(page)
    return reader.tables


def _leading_number(cell: str) -> int:
    return int(cell.split()[0].replace(",", ""))


@pytest.mark.parametrize("name", REPORTS)
def test_page_is_well_formed_and_self_contained(name):
    page = pictures.html_page(REPORTS[name]())
    checker = assert_well_formed(page)
    assert checker.tags.count("svg") == 2
    assert "script" not in checker.tags and "link" not in checker.tags
    assert "img" not in checker.tags and "@import" not in page
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert urls <= {pictures.SVG_NS}
    assert set(re.findall(r"url\(([^)]*)\)", page)) <= {"#mtvg-map-free-hatch",
                                                         "#mtvg-map-group-hatch"}


@pytest.mark.parametrize("name", ["kws", "kws-profiled", "host", "200-layers"])
def test_tables_hold_the_reports_numbers(name):
    report = REPORTS[name]()
    tables = read_tables(pictures.html_page(report))
    region_tables = [rows for klass, rows in tables if klass == "region"]
    assert len(region_tables) == len(report["regions"])
    for region, rows in zip(report["regions"], region_tables, strict=True):
        header, *body = rows
        assert [c for c, _ in header][:4] == ["block", "category", "address", "bytes"]
        blocks = {b["label"]: b for b in region["blocks"]}
        block_rows = body[:len(blocks)]
        assert {row[0][0] for row in block_rows} == set(blocks)
        for row in block_rows:
            block = blocks[row[0][0]]
            assert row[1][0] == block["category"]
            assert _leading_number(row[3][0]) == block["bytes"] == int(row[3][1])
            whole = region["size"] or region["used"]
            assert row[4][0] == pictures.percent(block["bytes"], whole)
        sums = {row[0][0]: _leading_number(row[3][0]) for row in body[len(blocks):]}
        assert sums["used"] == region["used"]
        if region["size"] is not None:
            assert sums["free"] == region["free"] and sums["size"] == region["size"]
    ((_, layer_rows),) = [(k, rows) for k, rows in tables if k == "layers"]
    header, *body = layer_rows
    names = [c for c, _ in header]
    assert names[:9] == ["#", "kernel", "operators", "inputs", "outputs", "MACs", "weights B",
                         "implementation", "code B"]
    assert ("profile" in names) == (name == "kws-profiled")
    assert len(body) == len(report["layers"])
    for row, layer in zip(body, report["layers"], strict=True):
        cells = dict(zip(names, (c for c, _ in row), strict=True))
        assert int(cells["#"]) == layer["index"]
        assert cells["kernel"] == layer["kernel"]
        assert cells["operators"] == ", ".join(layer["operators"])
        assert (_leading_number(cells["MACs"]) if layer["macs"] is not None
                else cells["MACs"] == "—") in (layer["macs"], True)
        assert _leading_number(cells["weights B"]) == layer["weights_bytes"]
        assert _leading_number(cells["code B"]) == layer["code_bytes"]
        assert cells["implementation"] == layer["implementation"]
        for column in ("inputs", "outputs"):
            shown = cells[column].replace("\u00a0", " ").split("\n")
            for line, tensor in zip(shown, layer[column], strict=True):
                assert line == (f"{tensor['dtype']} {pictures.shape_text(tensor['shape'])} · "
                                f"{pictures.human_bytes(tensor['bytes'])} · {tensor['where']}")
        if "profile" in cells:
            assert cells["profile"] == (pictures.percent(layer["profile"]["share"], 1.0)
                                        + f"{layer['profile']['instructions']:,} instructions")


def test_page_heading_board_project_totals_and_stack():
    report = kws_report()
    page = pictures.html_page(report)
    assert "<h1>kws on nucleo-f746zg</h1>" in page
    assert "<code>/tmp/x/kws</code>" in page
    assert 'class="estimate"' not in page
    assert "RAM <b>" in page and f"({report['totals']['ram']:,} B)" in page
    assert f"({report['totals']['macs']:,})" in page
    assert ("deepest use at most <b>1,234 B (1.2 KiB)</b> of 32,768 B (32.0 KiB) reserved "
            "(3.8 %)") in page
    assert "Reset_Handler → main → mtvg_run" in page


def test_page_lists_the_reports_notes():
    report = kws_report()
    report["notes"] = ["no profile of this build: run --profile adds each layer's time", HOSTILE]
    page = pictures.html_page(report)
    assert "<li>no profile of this build: run --profile adds each layer&#x27;s time</li>" in page
    assert "<script" not in page
    assert_well_formed(page)


def test_page_says_unbounded_and_why():
    page = pictures.html_page(host_report())
    assert ("<b>unbounded</b>: recursion through qsort&#x27;s comparison callback · the stack "
            "is the operating system&#x27;s (no fixed reservation)") in page


def test_page_gives_a_bound_without_a_reservation():
    report = host_report()
    report["stack"] = StackBound(296, None, ["tvmgen_default_run", "q_conv2d"]).to_json()
    assert ("deepest use at most <b>296 B</b>; the stack is the operating system&#x27;s"
            in pictures.html_page(report))


def test_an_estimate_is_marked_visibly():
    report = kws_report(estimate=True)
    page = pictures.html_page(report)
    assert '<p class="estimate">Estimate:' in page and "(estimate)</title>" in page
    assert "estimate" in "".join(parse_svg(pictures.memory_svg(report)).itertext())


def test_numbers_are_readable():
    assert pictures.human_bytes(812) == "812 B"
    assert pictures.human_bytes(27_248) == "26.6 KiB"
    assert pictures.human_bytes(4 * MIB) == "4.00 MiB"
    assert pictures.bytes_text(27_248) == "27,248 B (26.6 KiB)"
    assert pictures.human_count(2_656_000) == "2.66 M"
    assert pictures.percent(8, 4 * MIB) == "<0.1 %"
    assert pictures.shape_text([1, 49, 10, 1]) == "1×49×10×1" and pictures.shape_text([]) == \
        "scalar"


# -- In a browser ---------------------------------------------------------------------------

BROWSER_SECONDS = 30


def test_chromium_renders_the_page_without_errors(tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install -y chromium)")
    page = tmp_path / "report.html"
    page.write_text(pictures.html_page(kws_report(profile=True, estimate=True)),
                    encoding="utf-8")
    run = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", "--enable-logging=stderr",
         "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=BROWSER_SECONDS, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line
               or "Uncaught" in line or page.name in line]
    assert not console, console
    dom = run.stdout
    assert dom.count("<svg") == 2
    assert dom.count('class="block"') + dom.count('class="block group"') >= 12
    assert dom.count('class="layer"') >= 12  # the rows in the picture and the table
    assert "q_depthwise_conv2d" in dom and "Estimate:" in dom
