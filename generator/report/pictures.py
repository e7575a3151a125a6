"""The pictures of `microtvm-gen report`: where every byte goes (a memory map), where every
cycle goes (a per-layer profile), and one self-contained HTML page with both and the tables
behind them.

Everything is drawn from the report's JSON (the dataclasses of generator/report/model.py) by
plain string building: no plotting library, no script, nothing fetched, so the page works
offline, with JavaScript off, and as a single file to mail. Every text taken from the report
(tensor names, labels and details come from user models) goes through `esc`, so a model can
never put markup or script into a picture or the page.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

from generator.report.model import CATEGORIES

SVG_NS = "http://www.w3.org/2000/svg"
FONT_FAMILY = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"

# Colours. Fills are light enough for dark text on every one of them.
TEXT_COLOUR = "#1f2328"
MUTED_COLOUR = "#59636e"
WARNING_COLOUR = "#b42318"
ESTIMATE_COLOUR = "#9a6700"
OUTLINE_COLOUR = "#ffffff"
FREE_COLOUR = "#eef0f2"
FREE_OUTLINE_COLOUR = "#b8bec5"
GAUGE_USED_COLOUR = "#57606a"
STACK_BOUND_COLOUR = "#2f5f66"
ROW_STRIPE_COLOUR = "#f4f6f8"
MACS_BAR_COLOUR = "#8c959f"
CATEGORY_COLOURS = {
    "weights": "#f6b26b",
    "kernel-code": "#6fa8dc",
    "model-code": "#a9cdee",
    "accelerator": "#b4a7d6",
    "runtime": "#93c47d",
    "app": "#c5e0b4",
    "startup-libc": "#d5a6bd",
    "activations": "#ea9999",
    "io": "#ffd966",
    "stack": "#a2c4c9",
    "other": "#cccccc",
}
IMPLEMENTATION_COLOURS = {
    "ours": "#6fa8dc",
    "cmsis-nn": "#93c47d",
    "accelerator": "#b4a7d6",
    "tvm": "#f6b26b",
    "other": "#cccccc",
}

# Sizes, in SVG user units (px at 100 %).
PICTURE_WIDTH = 1000
MARGIN = 20
TITLE_FONT = 15
FONT = 12
SMALL_FONT = 10
LEGEND_SWATCH = 12
LEGEND_ROW = 20
LEGEND_GAP = 14

# The memory map.
BAR_WIDTH = PICTURE_WIDTH - 2 * MARGIN
BAR_HEIGHT = 44
BLOCK_FONT = 11
MIN_BLOCK_PX = 5.0  # the narrowest block drawn, so a 24 B block can still be hovered
BROKEN_BELOW_PX = 320.0  # a used part narrower than this to scale gets a broken bar...
BROKEN_USED_PX = 720.0  # ...whose used part is drawn this wide...
BREAK_GAP_PX = 18.0  # ...then a break, then the free part in what is left
GAUGE_HEIGHT = 6
REGION_GAP = 26
STACK_MARK_HEIGHT = 6

# The per-layer profile.
INDEX_RIGHT_X = MARGIN + 34  # the layer numbers end here (right-aligned)
LABEL_X = INDEX_RIGHT_X + 8
LABEL_WIDTH = 280.0
LAYER_BAR_X = LABEL_X + LABEL_WIDTH + 12
LAYER_FONT = 11
ROW_HEIGHT = 20  # a row with one bar
ROW_HEIGHT_TWO_BARS = 30  # a row with the profile bar and the thin MACs bar
LAYER_BAR_HEIGHT = 12
MACS_BAR_HEIGHT = 5
MIN_LAYER_BAR_PX = 1.0
MIN_LAYER_BAR_SPAN = 200.0
LAYER_TITLE_LINES = 24  # inputs and outputs listed in a hover before "... and N more"

GROUP_TITLE_LINES = 40  # blocks listed in a group's hover before "... and N more"
PROFILE_MEASURES = ("instructions", "cycles", "ns")
NBSP = "\u00a0"
# Text widths, in ems (no font metrics at hand: a generous estimate by kind of letter).
NARROW_CHARACTERS = frozenset("iljtfrI.,:;'|!()[] ")
WIDE_CHARACTERS = frozenset("mwMW@%")
NARROW_UNITS, AVERAGE_UNITS, CAPITAL_UNITS, WIDE_UNITS = 0.34, 0.58, 0.72, 0.9

# Characters XML 1.0 forbids even escaped (and lone surrogates, which cannot be encoded).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


# -- Text and numbers -------------------------------------------------------------------


def esc(value: object) -> str:
    """`value` as text safe in XML and HTML, in element content and in quoted attributes."""
    return html.escape(_NOT_XML.sub("\ufffd", str(value)), quote=True)


def grouped(number: int | float) -> str:
    """12,345 (thousands separators; floats without decimals)."""
    return f"{round(number):,}"


def human_bytes(count: int) -> str:
    """A short size: 812 B, 26.6 KiB, 4.00 MiB."""
    if abs(count) < 1024:
        return f"{count} B"
    if abs(count) < 1024 * 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count / (1024 * 1024):.2f} MiB"


def bytes_text(count: int) -> str:
    """Exact and short: 27,248 B (26.6 KiB); 812 B."""
    if abs(count) < 1024:
        return f"{count:,} B"
    return f"{count:,} B ({human_bytes(count)})"


def human_count(count: int | float) -> str:
    """A short count: 812, 64.0 k, 2.66 M, 1.20 G."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(count) >= limit:
            return f"{count / limit:.3g} {suffix}"
    return grouped(count)


def percent(part: float, whole: float) -> str:
    """part of whole as 2.6 %, <0.1 % for a sliver, and '' when whole is 0."""
    if not whole:
        return ""
    share = 100.0 * part / whole
    return "<0.1 %" if 0 < share < 0.05 else f"{share:.1f} %"


def duration(ns: float) -> str:
    """Nanoseconds as 812 ns, 3.4 µs, 12.5 ms, 1.20 s."""
    for limit, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if ns >= limit:
            return f"{ns / limit:.3g} {unit}"
    return f"{grouped(ns)} ns"


def shape_text(shape: Sequence[int]) -> str:
    """1×49×10×1; 'scalar' for a shape of no dimensions."""
    return "×".join(str(d) for d in shape) if shape else "scalar"


def tensor_text(tensor: dict) -> str:
    """int8 1×49×10×1 (490 B) input 'input_1'."""
    where = tensor.get("where") or tensor.get("kind", "")
    return (f"{tensor.get('dtype', '?')} {shape_text(tensor.get('shape') or [])} "
            f"({bytes_text(tensor.get('bytes', 0))}) {where}").rstrip()


def text_width(text: str, font_px: float) -> float:
    """A generous estimate of how wide `text` is drawn in a sans-serif font: no font metrics
    are at hand, so narrow and wide letters are told apart and the rest taken as average."""
    units = 0.0
    for char in text:
        if char in NARROW_CHARACTERS:
            units += NARROW_UNITS
        elif char in WIDE_CHARACTERS:
            units += WIDE_UNITS
        elif char.isupper() or not char.isascii():
            units += CAPITAL_UNITS
        else:
            units += AVERAGE_UNITS
    return units * font_px


def fit_text(text: str, width: float, font_px: float) -> str:
    """`text`, or as much of it as fits in `width` followed by '…'; '' when not even two
    letters fit."""
    if text_width(text, font_px) <= width:
        return text
    most = int(width / (NARROW_UNITS * font_px)) + 1  # no more letters can fit
    for end in range(min(len(text) - 1, most), 1, -1):
        shortened = text[:end].rstrip() + "…"
        if text_width(shortened, font_px) <= width:
            return shortened
    return ""


# -- SVG pieces ---------------------------------------------------------------------------


def _number(value: float) -> str:
    """A coordinate: at most two decimals, no trailing zeros."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def attributes(**values: object) -> str:
    """ x="1" fill="#fff" ...: keyword names with _ written as -, None values left out."""
    parts = []
    for name, value in values.items():
        if value is None:
            continue
        text = _number(value) if isinstance(value, float) else str(value)
        parts.append(f' {name.rstrip("_").replace("_", "-")}="{esc(text)}"')
    return "".join(parts)


def rect(x: float, y: float, width: float, height: float, fill: str, **more: object) -> str:
    """A <rect> (coordinates rounded to 0.01)."""
    values = attributes(x=float(x), y=float(y), width=float(width), height=float(height),
                        fill=fill, **more)
    return f"<rect{values}/>"


def text(x: float, y: float, content: str, **more: object) -> str:
    """A <text> element holding `content`, which is markup already (escape texts first)."""
    return f"<text{attributes(x=float(x), y=float(y), **more)}>{content}</text>"


def title(content: str) -> str:
    """A hover text (plain text: it is escaped here)."""
    return f"<title>{esc(content)}</title>"


def svg_document(width: int, height: float, body: list[str], label: str) -> str:
    """A standalone SVG picture of `body` (also fit to be put inline in an HTML page)."""
    height = int(height + 0.999)
    return (f'<svg xmlns="{SVG_NS}"{attributes(width=width, height=height)}'
            f' viewBox="0 0 {width} {height}" role="img" aria-label="{esc(label)}"'
            f'{attributes(font_family=FONT_FAMILY, font_size=FONT, fill=TEXT_COLOUR)}>\n'
            + "\n".join(body) + "\n</svg>\n")


def hatch_pattern(pattern_id: str, colour: str) -> str:
    """A pattern of diagonal lines, laid over fills that mean 'not one block' or 'not to
    scale'."""
    return (f'<pattern id="{pattern_id}" width="6" height="6" patternUnits="userSpaceOnUse"'
            f' patternTransform="rotate(45)"><rect width="2.2" height="6" fill="{colour}"/>'
            "</pattern>")


@dataclass
class LegendItem:
    """One swatch of a legend."""

    label: str
    fill: str
    pattern: str | None = None  # a pattern id drawn over the fill


def legend(items: list[LegendItem], top: float) -> tuple[list[str], float]:
    """Swatches with their names, wrapped over as many rows as needed: (elements, height)."""
    elements = []
    x, y = float(MARGIN), top
    for item in items:
        width = LEGEND_SWATCH + 5 + text_width(item.label, FONT) + LEGEND_GAP
        if x + width > PICTURE_WIDTH - MARGIN and x > MARGIN:
            x, y = float(MARGIN), y + LEGEND_ROW
        elements.append(rect(x, y, LEGEND_SWATCH, LEGEND_SWATCH, item.fill,
                             stroke=FREE_OUTLINE_COLOUR, stroke_width=0.5))
        if item.pattern:
            elements.append(rect(x, y, LEGEND_SWATCH, LEGEND_SWATCH, f"url(#{item.pattern})"))
        elements.append(text(x + LEGEND_SWATCH + 5, y + LEGEND_SWATCH - 2, esc(item.label),
                             class_="legend"))
        x += width
    return elements, (y - top + LEGEND_ROW if items else 0.0)


def _report_heading(report: dict, what: str) -> str:
    """'Memory map of kws on nucleo-f746zg' (escaped text)."""
    project = str(report.get("project") or "").rstrip("/").rsplit("/", 1)[-1] or "the model"
    board = report.get("board") or "?"
    return f"{esc(what)} of {esc(project)} on {esc(board)}"


# -- The memory map -------------------------------------------------------------------------


def category_colour(category: str) -> str:
    """The fill of a category (an unknown one is drawn as 'other')."""
    return CATEGORY_COLOURS.get(category, CATEGORY_COLOURS["other"])


def _address_key(indexed: tuple[int, dict]) -> tuple[bool, int, int]:
    index, block = indexed
    address = block.get("address")
    return (address is None, address if address is not None else 0, index)


def ordered_blocks(blocks: list[dict]) -> list[dict]:
    """The blocks in address order; those without an address after them, as listed."""
    return [block for _, block in sorted(enumerate(blocks), key=_address_key)]


@dataclass
class Piece:
    """What the map draws as one rectangle: a block, or a run of neighbouring blocks each too
    thin to draw apart ('N small blocks', listed in the hover)."""

    blocks: list[dict]

    @property
    def bytes(self) -> int:
        return sum(b.get("bytes", 0) for b in self.blocks)

    @property
    def is_group(self) -> bool:
        return len(self.blocks) > 1

    @property
    def category(self) -> str:
        """The category holding most of the bytes."""
        totals: dict[str, int] = {}
        for block in self.blocks:
            category = block.get("category", "other")
            totals[category] = totals.get(category, 0) + block.get("bytes", 0)
        return max(totals, key=lambda c: totals[c])

    @property
    def label(self) -> str:
        return f"{len(self.blocks)} small blocks" if self.is_group else \
            str(self.blocks[0].get("label", ""))


def pieces(blocks: list[dict], px_per_byte: float) -> list[Piece]:
    """The blocks as pieces: neighbours that would each be drawn under MIN_BLOCK_PX are grouped
    into one piece; the rest are pieces of one block."""
    found: list[Piece] = []
    run: list[dict] = []
    for block in blocks:
        if block.get("bytes", 0) * px_per_byte < MIN_BLOCK_PX:
            run.append(block)
            continue
        if run:
            found.append(Piece(run))
            run = []
        found.append(Piece([block]))
    if run:
        found.append(Piece(run))
    return found


def piece_widths(sizes: list[int], width: float, minimum: float) -> list[tuple[float, bool]]:
    """(width, drawn to scale) of each size: widths in proportion to `sizes` that fill
    `width`, except that none is under `minimum`: those are widened to `minimum` (not to
    scale) and the others share what is left, still in proportion to each other."""
    if not sizes:
        return []
    minimum = min(minimum, width / len(sizes))
    narrow: set[int] = set()
    while True:
        room = width - minimum * len(narrow)
        rest = sum(s for i, s in enumerate(sizes) if i not in narrow)
        scale = room / rest if rest > 0 else 0.0
        newly = {i for i, s in enumerate(sizes) if i not in narrow and s * scale < minimum}
        if not newly:
            return [(minimum, False) if i in narrow else (s * scale, True)
                    for i, s in enumerate(sizes)]
        narrow |= newly


@dataclass
class RegionLayout:
    """How a region's bar is divided."""

    used_px: float  # the blocks' part
    free_px: float  # the free part (0: none drawn)
    broken: bool  # the free part is drawn shorter than to scale (a break between)
    end_px: float | None = None  # where the region ends, when the blocks overflow it


def region_layout(used: int, size: int | None) -> RegionLayout:
    """To scale when that shows the blocks; else a broken bar. A region without a size (a
    host program's) is scaled to its used bytes; one overflowing is scaled to its used bytes
    with its end marked."""
    if size is None:
        return RegionLayout(BAR_WIDTH if used > 0 else 0.0, 0.0, False)
    if used > size:
        return RegionLayout(BAR_WIDTH, 0.0, False, BAR_WIDTH * max(size, 0) / used)
    if size <= 0:
        return RegionLayout(0.0, 0.0, False)
    to_scale = BAR_WIDTH * used / size
    if used == 0 or to_scale >= BROKEN_BELOW_PX:
        return RegionLayout(to_scale, BAR_WIDTH - to_scale, False)
    return RegionLayout(BROKEN_USED_PX, BAR_WIDTH - BROKEN_USED_PX - BREAK_GAP_PX, True)


def _region_share(count: int, region: dict) -> str:
    """'2.6 % of FLASH' (of its size; of its used bytes when it has no size)."""
    if region.get("size"):
        return f"{percent(count, region['size'])} of {region.get('name', '')}"
    used = region_used(region)
    return f"{percent(count, used)} of the bytes used in {region.get('name', '')}" if used \
        else ""


def region_used(region: dict) -> int:
    """The region's used bytes (summed from its blocks when the report leaves them out)."""
    used = region.get("used")
    if used is not None:
        return used
    return sum(b.get("bytes", 0) for b in region.get("blocks") or [])


def _stack_note(stack: dict | None, reserved: int) -> str:
    """The stack bound, for the hover of the stack block."""
    if not stack:
        return ""
    if stack.get("bound_bytes") is None:
        return f"deepest use: unbounded ({stack.get('reason') or 'no reason given'})"
    bound = stack["bound_bytes"]
    return (f"deepest use (bound): {bytes_text(bound)}, {percent(bound, reserved)} of the "
            "reservation")


def block_title(block: dict, region: dict, stack: dict | None) -> str:
    """A block's hover: label, bytes, share, category, address, detail (and the stack
    bound, on the stack block)."""
    address = block.get("address")
    lines = [f"{block.get('label', '')} — {bytes_text(block.get('bytes', 0))}, "
             f"{_region_share(block.get('bytes', 0), region)}",
             f"category: {block.get('category', 'other')}"
             + (f" · at {hex_address(address)}" if address is not None else "")]
    if block.get("detail"):
        lines.append(str(block["detail"]))
    if block.get("category") == "stack" and stack:
        lines.append(_stack_note(stack, block.get("bytes", 0)))
    return "\n".join(lines)


def group_title(piece: Piece, region: dict) -> str:
    """A group's hover: its total, then each block (the first GROUP_TITLE_LINES)."""
    lines = [f"{piece.label} — {bytes_text(piece.bytes)}, {_region_share(piece.bytes, region)}"]
    for block in piece.blocks[:GROUP_TITLE_LINES]:
        where = block.get("address")
        lines.append(f"• {block.get('label', '')}: {bytes_text(block.get('bytes', 0))} "
                     f"({block.get('category', 'other')})"
                     + (f" at {hex_address(where)}" if where is not None else "")
                     + (f" — {block['detail']}" if block.get("detail") else ""))
    if len(piece.blocks) > GROUP_TITLE_LINES:
        lines.append(f"… and {len(piece.blocks) - GROUP_TITLE_LINES} more")
    return "\n".join(lines)


def hex_address(address: int) -> str:
    """0x08001240."""
    return f"0x{address:08X}"


def block_labels(label: str, count: int, x: float, y: float, width: float) -> list[str]:
    """The label and the size written inside a block, each when it fits."""
    room = width - 8
    shown = fit_text(label, room, BLOCK_FONT)
    if not shown:
        return []
    drawn = [text(x + 4, y + 18, esc(shown), font_size=BLOCK_FONT, class_="block-label")]
    size = human_bytes(count)
    if text_width(size, SMALL_FONT) <= room:
        drawn.append(text(x + 4, y + 34, esc(size), font_size=SMALL_FONT,
                          fill=MUTED_COLOUR, class_="block-bytes"))
    return drawn


def stack_mark(block: dict, stack: dict | None, x: float, y: float, width: float) -> list[str]:
    """The stack bound drawn inside the stack block: a dark strip along its foot, as long as
    the deepest use is of the reservation."""
    bound = (stack or {}).get("bound_bytes")
    reserved = block.get("bytes", 0)
    if block.get("category") != "stack" or bound is None or reserved <= 0:
        return []
    share = min(1.0, bound / reserved)
    return [rect(x, y + BAR_HEIGHT - STACK_MARK_HEIGHT, max(1.0, width * share),
                 STACK_MARK_HEIGHT, STACK_BOUND_COLOUR, class_="stack-bound")]


def piece_svg(piece: Piece, region: dict, stack: dict | None,
              x: float, y: float, width: float, exact: bool) -> str:
    """One block (or group) of the bar, with its hover; `exact`: drawn to the bar's scale
    (not widened to MIN_BLOCK_PX)."""
    block = piece.blocks[0]
    hover = group_title(piece, region) if piece.is_group else block_title(block, region, stack)
    klass = "block group" if piece.is_group else "block"
    elements = [f'<g{attributes(class_=klass, data_category=piece.category)}>', title(hover),
                rect(x, y, width, BAR_HEIGHT, category_colour(piece.category),
                     stroke=OUTLINE_COLOUR, stroke_width=0.5, data_bytes=piece.bytes,
                     data_label=piece.label, data_to_scale="yes" if exact else "no")]
    if piece.is_group:
        elements.append(rect(x, y, width, BAR_HEIGHT, "url(#mtvg-map-group-hatch)"))
    else:
        elements += stack_mark(block, stack, x, y, width)
    elements += block_labels(piece.label, piece.bytes, x, y, width)
    elements.append("</g>")
    return "".join(elements)


def region_heading(region: dict) -> tuple[str, bool]:
    """The line above a region's bar (markup) and whether it overflows."""
    used, size, free = region_used(region), region.get("size"), region.get("free")
    name = esc(region.get("name", ""))
    kind = esc(region.get("kind", ""))
    if size is None:
        figures = f"used {esc(bytes_text(used))} · no fixed size"
    else:
        if free is None:
            free = size - used
        figures = (f"used {esc(bytes_text(used))} of {esc(human_bytes(size))} "
                   f"({esc(percent(used, size) or '0 %')})")
        figures += (f" · free {esc(human_bytes(free))}" if free >= 0 else
                    f' · <tspan fill="{WARNING_COLOUR}" font-weight="bold">over by '
                    f"{esc(bytes_text(-free))}</tspan>")
    return (f'<tspan font-weight="bold">{name}</tspan> <tspan fill="{MUTED_COLOUR}">{kind}'
            f"</tspan> · {figures}", size is not None and used > size)


def free_part(region: dict, layout: RegionLayout, x: float, y: float) -> list[str]:
    """The free part of the bar (broken: after a break, hatched, 'not to scale')."""
    size, used = region.get("size"), region_used(region)
    if size is None or layout.free_px <= 0:
        return []
    free = size - used
    elements = []
    if layout.broken:
        middle = x - BREAK_GAP_PX / 2
        for offset in (-3, 3):
            elements.append(f'<polyline{attributes(points=_break_points(middle + offset, y))}'
                            f' fill="none" stroke="{GAUGE_USED_COLOUR}" stroke-width="1.2"/>')
    hover = (f"free — {bytes_text(free)}, {percent(free, size)} of "
             f"{region.get('name', '')} ({bytes_text(size)})")
    if layout.broken:
        hover += "\ndrawn shorter than to scale (the break): the used part is enlarged"
    elements += ['<g class="free">', title(hover),
                 rect(x, y, layout.free_px, BAR_HEIGHT, FREE_COLOUR,
                      stroke=FREE_OUTLINE_COLOUR, stroke_width=0.5, data_bytes=free)]
    if layout.broken:
        elements.append(rect(x, y, layout.free_px, BAR_HEIGHT, "url(#mtvg-map-free-hatch)"))
    label = fit_text(f"free {human_bytes(free)}", layout.free_px - 8, BLOCK_FONT)
    if label:
        elements.append(text(x + 4, y + 18, esc(label), font_size=BLOCK_FONT,
                             fill=MUTED_COLOUR))
    if layout.broken and text_width("not to scale", SMALL_FONT) <= layout.free_px - 8:
        elements.append(text(x + 4, y + 34, "not to scale", font_size=SMALL_FONT,
                             fill=MUTED_COLOUR, font_style="italic"))
    elements.append("</g>")
    return elements


def _break_points(x: float, y: float) -> str:
    """A zigzag across the bar at x: the broken axis."""
    steps = 6
    points = []
    for i in range(steps + 1):
        points.append(f"{_number(x + (2.5 if i % 2 else -2.5))},"
                      f"{_number(y - 4 + i * (BAR_HEIGHT + 8) / steps)}")
    return " ".join(points)


def gauge(region: dict, y: float) -> list[str]:
    """Under a broken bar, the truth to scale: a thin gauge of used against size."""
    size, used = region["size"], region_used(region)
    used_px = max(1.0, BAR_WIDTH * used / size)
    hover = (f"to scale: {bytes_text(used)} used of {bytes_text(size)} "
             f"({percent(used, size)})")
    return ['<g class="gauge">', title(hover),
            rect(MARGIN, y, BAR_WIDTH, GAUGE_HEIGHT, FREE_COLOUR, stroke=FREE_OUTLINE_COLOUR,
                 stroke_width=0.5),
            rect(MARGIN, y, used_px, GAUGE_HEIGHT, GAUGE_USED_COLOUR), "</g>"]


def region_svg(region: dict, stack: dict | None, top: float) -> tuple[list[str], float]:
    """One region: its heading, its bar of blocks and free part, the scale line under it:
    (elements, height)."""
    blocks = ordered_blocks(region.get("blocks") or [])
    used, size = region_used(region), region.get("size")
    layout = region_layout(used, size)
    heading, overflows = region_heading(region)
    sections = ", ".join(f"{name} {bytes_text(n)}"
                         for name, n in (region.get("sections") or {}).items())
    elements = ['<g class="region-heading">',
                title(f"ELF sections here: {sections}" if sections else "no ELF sections"),
                text(MARGIN, top + 14, heading), "</g>"]
    bar_y = top + 22
    if not blocks and not layout.free_px:
        elements += [rect(MARGIN, bar_y, BAR_WIDTH, BAR_HEIGHT, FREE_COLOUR,
                          stroke=FREE_OUTLINE_COLOUR, stroke_width=0.5),
                     text(MARGIN + 6, bar_y + 18, "empty", fill=MUTED_COLOUR,
                          font_size=BLOCK_FONT)]
    total = sum(b.get("bytes", 0) for b in blocks)
    parts = pieces(blocks, layout.used_px / total if total else 0.0)
    x = float(MARGIN)
    for piece, (width, to_scale) in zip(
            parts, piece_widths([p.bytes for p in parts], layout.used_px, MIN_BLOCK_PX),
            strict=True):
        elements.append(piece_svg(piece, region, stack, x, bar_y, width, to_scale))
        x += width
    free_x = x + (BREAK_GAP_PX if layout.broken else 0.0)
    elements += free_part(region, layout, free_x, bar_y)
    below = bar_y + BAR_HEIGHT + 4
    if layout.end_px is not None:
        elements += overflow_mark(MARGIN + layout.end_px, bar_y)
    if layout.broken:
        elements += gauge(region, below)
        below += GAUGE_HEIGHT + 2
    elements += scale_line(region, layout, below + 11)
    return elements, below + 11 + 4 - top + (4 if overflows else 0)


def overflow_mark(x: float, bar_y: float) -> list[str]:
    """A red line where an overflowing region ends."""
    line = attributes(x1=float(x), y1=float(bar_y - 4), x2=float(x),
                      y2=float(bar_y + BAR_HEIGHT + 4), stroke=WARNING_COLOUR, stroke_width=2.5)
    return ['<g class="overflow">',
            title("the region ends here: the blocks right of the line do not fit"),
            f"<line{line}/>", "</g>"]


def scale_line(region: dict, layout: RegionLayout, baseline: float) -> list[str]:
    """Under the bar: the first and last address, and how the bar is scaled."""
    size, used, origin = region.get("size"), region_used(region), region.get("origin")
    kind = region.get("kind")
    addressed = origin is not None and kind != "host"
    elements = []
    left = hex_address(origin) if addressed else ""
    if layout.broken:
        note = (f"used part enlarged: to scale (the thin gauge) it is {percent(used, size)} "
                "of the region")
    elif size is None:
        note = "scaled to the used bytes (no fixed size)"
    elif layout.end_px is not None:
        note = "scaled to the used bytes: the red line is the end of the region"
    else:
        note = "to scale"
    note_x = MARGIN + (text_width(left, SMALL_FONT) + 14 if left else 0)
    if left:
        elements.append(text(MARGIN, baseline, left, font_size=SMALL_FONT, fill=MUTED_COLOUR))
    elements.append(text(note_x, baseline, esc(note), font_size=SMALL_FONT, fill=MUTED_COLOUR,
                         font_style="italic"))
    if addressed and size is not None:
        elements.append(text(MARGIN + BAR_WIDTH, baseline, hex_address(origin + size),
                             font_size=SMALL_FONT, fill=MUTED_COLOUR, text_anchor="end"))
    return elements


def categories_in(report: dict) -> list[str]:
    """The categories the report's blocks use, in CATEGORIES order (unknown ones as 'other')."""
    used = {b.get("category") if b.get("category") in CATEGORY_COLOURS else "other"
            for r in report.get("regions") or [] for b in r.get("blocks") or []}
    return [c for c in CATEGORIES if c in used]


def map_legend(report: dict) -> list[LegendItem]:
    """The categories present, then the marks the bars use (free, groups, the stack bound):
    each only when some region draws it (found by drawing the regions once)."""
    drawn = "".join("".join(region_svg(region, report.get("stack"), 0.0)[0])
                    for region in report.get("regions") or [])
    items = [LegendItem(c, category_colour(c)) for c in categories_in(report)]
    if 'class="free"' in drawn:
        items.append(LegendItem("free", FREE_COLOUR))
    if 'class="block group"' in drawn:
        items.append(LegendItem("small blocks grouped", CATEGORY_COLOURS["other"],
                                "mtvg-map-group-hatch"))
    if 'class="stack-bound"' in drawn:
        items.append(LegendItem("stack bound (deepest use)", STACK_BOUND_COLOUR))
    return items


def memory_svg(report: dict) -> str:
    """The memory map: one bar per region, its blocks in address order coloured by category,
    each with a hover (label, bytes, detail); a legend; used/size/free as text."""
    regions = report.get("regions") or []
    body = [f"<defs>{hatch_pattern('mtvg-map-free-hatch', '#ffffff')}"
            f"{hatch_pattern('mtvg-map-group-hatch', '#ffffff')}</defs>"]
    heading = _report_heading(report, "Memory map")
    if report.get("estimate"):
        heading += (f' <tspan fill="{ESTIMATE_COLOUR}" font-weight="bold">(estimate: not read '
                    "from a linked firmware)</tspan>")
    body.append(text(MARGIN, MARGIN + TITLE_FONT, heading, font_size=TITLE_FONT,
                     font_weight="bold"))
    y = MARGIN + TITLE_FONT + 12.0
    drawn, height = legend(map_legend(report), y)
    body += drawn
    y += height + 10
    if not regions:
        body.append(text(MARGIN, y + 14, "no memory regions in this report",
                         fill=MUTED_COLOUR))
        y += 24
    for region in regions:
        drawn, height = region_svg(region, report.get("stack"), y)
        body += drawn
        y += height + REGION_GAP
    return svg_document(PICTURE_WIDTH, y - REGION_GAP + MARGIN if regions else y + MARGIN,
                        body, "memory map")


# -- The per-layer profile ------------------------------------------------------------------


def implementation_family(implementation: str) -> str:
    """'accelerator:ethos-u' → 'accelerator'; unknown ones → 'other'."""
    family = implementation.split(":", 1)[0]
    return family if family in IMPLEMENTATION_COLOURS else "other"


def profile_measure(profile: dict | None) -> tuple[str, float] | None:
    """(unit, amount) of a layer's profile: instructions, cycles or ns."""
    for unit in PROFILE_MEASURES:
        if profile and isinstance(profile.get(unit), (int, float)):
            return unit, profile[unit]
    return None


def measure_text(unit: str, amount: float) -> str:
    return duration(amount) if unit == "ns" else f"{grouped(amount)} {unit}"


def profile_shares(layers: list[dict]) -> list[float | None]:
    """Each layer's share of the run: its profile's 'share', else its measure over all."""
    measures = [profile_measure(layer.get("profile")) for layer in layers]
    total = sum(m[1] for m in measures if m)
    shares: list[float | None] = []
    for layer, measure in zip(layers, measures, strict=True):
        share = (layer.get("profile") or {}).get("share")
        if share is None and measure and total:
            share = measure[1] / total
        shares.append(share)
    return shares


@dataclass
class LayerBars:
    """What the bars of the per-layer picture show."""

    caption: str  # what the main bar measures
    main: list[float | None]  # the main bar's value per layer (None: not known)
    main_texts: list[str]  # the number written at its end
    profiled: bool  # the main bar is the profile's share, and a thin MACs bar goes under it


def layer_bars(layers: list[dict]) -> LayerBars:
    """The profile's share when there is a profile, else MACs, else weights bytes."""
    macs = [layer.get("macs") for layer in layers]
    total_macs = sum(m for m in macs if m)
    if any(layer.get("profile") for layer in layers):
        shares = profile_shares(layers)
        units = {m[0] for m in map(profile_measure, (la.get("profile") for la in layers)) if m}
        texts = []
        for layer, share in zip(layers, shares, strict=True):
            measure = profile_measure(layer.get("profile"))
            parts = [percent(share, 1.0)] if share is not None else ["no profile"]
            if measure:
                parts.append(measure_text(*measure))
            texts.append(" · ".join(parts))
        unit = "/".join(sorted(units)) or "time"
        return LayerBars(f"share of the run ({unit}, run --profile); thin bar: MACs",
                         list(shares), texts, True)
    if any(m is not None for m in macs):
        texts = [f"{m:,} MACs · {percent(m, total_macs)}".rstrip(" ·") if m is not None
                 else "MACs unknown" for m in macs]
        return LayerBars("multiply-accumulates (MACs) of each call",
                         [float(m) if m is not None else None for m in macs], texts, False)
    weights = [layer.get("weights_bytes", 0) for layer in layers]
    return LayerBars("weights bytes of each call (this archive gives no MACs)",
                     [float(w) for w in weights], [bytes_text(w) for w in weights], False)


def layer_name(layer: dict) -> str:
    """q_conv2d1 (conv2d, relu)."""
    operators = ", ".join(str(o) for o in layer.get("operators") or [])
    return f"{layer.get('kernel', '')} ({operators})" if operators else \
        str(layer.get("kernel", ""))


def layer_title(layer: dict, total_macs: int, share: float | None) -> str:
    """A layer's hover: its tensors, MACs, weights, implementation and profile."""
    macs = layer.get("macs")
    lines = [f"#{layer.get('index')} {layer_name(layer)}",
             f"implementation: {layer.get('implementation', '?')}"
             + (f" · code {bytes_text(layer['code_bytes'])}"
                if layer.get("code_bytes") is not None else ""),
             f"MACs: {macs:,} ({percent(macs, total_macs) or '0 %'} of the model)"
             if macs is not None else "MACs: not known",
             f"weights: {bytes_text(layer.get('weights_bytes', 0))}"]
    tensors = [("in", t) for t in layer.get("inputs") or []] + \
        [("out", t) for t in layer.get("outputs") or []]
    for direction, tensor in tensors[:LAYER_TITLE_LINES]:
        lines.append(f"{direction}: {tensor_text(tensor)}")
    if len(tensors) > LAYER_TITLE_LINES:
        lines.append(f"… and {len(tensors) - LAYER_TITLE_LINES} more tensors")
    measure = profile_measure(layer.get("profile"))
    if measure or share is not None:
        lines.append("profile: " + ", ".join(
            ([measure_text(*measure)] if measure else [])
            + ([f"{percent(share, 1.0)} of the run"] if share is not None else [])))
    return "\n".join(lines)


def bar_length(value: float | None, largest: float, span: float) -> float:
    """A bar's length for `value` where `largest` takes `span` (a sliver stays visible)."""
    if not value or largest <= 0:
        return 0.0
    return max(MIN_LAYER_BAR_PX, span * value / largest)


def layer_row(layer: dict, row: int, top: float, bars: LayerBars, span: float,
              largest: tuple[float, float], total_macs: int) -> list[str]:
    """One layer: number, name, main bar with its number, and the thin MACs bar."""
    height = ROW_HEIGHT_TWO_BARS if bars.profiled else ROW_HEIGHT
    value = bars.main[row]
    colour = IMPLEMENTATION_COLOURS[implementation_family(str(layer.get("implementation", "")))]
    share = value if bars.profiled else None
    elements = [f'<g{attributes(class_="layer", data_index=layer.get("index"))}>',
                title(layer_title(layer, total_macs, share)),
                rect(0, top, PICTURE_WIDTH, height,
                     ROW_STRIPE_COLOUR if row % 2 else "#ffffff", class_="row")]
    baseline = top + 4 + LAYER_BAR_HEIGHT - 2
    elements.append(text(INDEX_RIGHT_X, baseline, esc(layer.get("index", row)),
                         font_size=LAYER_FONT, fill=MUTED_COLOUR, text_anchor="end",
                         class_="layer-index"))
    label = fit_text(layer_name(layer), LABEL_WIDTH, LAYER_FONT)
    elements.append(text(LABEL_X, baseline, esc(label), font_size=LAYER_FONT,
                         class_="layer-label"))
    length = bar_length(value, largest[0], span)
    elements.append(rect(LAYER_BAR_X, top + 4, length, LAYER_BAR_HEIGHT, colour,
                         class_="layer-bar", data_value="" if value is None else repr(value)))
    elements.append(text(LAYER_BAR_X + length + 5, baseline, esc(bars.main_texts[row]),
                         font_size=LAYER_FONT, class_="layer-value"))
    if bars.profiled:
        macs = layer.get("macs")
        macs_y = top + 4 + LAYER_BAR_HEIGHT + 3
        macs_length = bar_length(macs, largest[1], span)
        elements.append(rect(LAYER_BAR_X, macs_y, macs_length, MACS_BAR_HEIGHT,
                             MACS_BAR_COLOUR, class_="macs-bar",
                             data_value=macs if macs is not None else ""))
        elements.append(text(LAYER_BAR_X + macs_length + 5, macs_y + MACS_BAR_HEIGHT + 2,
                             esc(f"{macs:,} MACs" if macs is not None else "MACs unknown"),
                             font_size=SMALL_FONT - 1, fill=MUTED_COLOUR, class_="macs-value"))
    elements.append("</g>")
    return elements


def layers_svg(report: dict) -> str:
    """The per-layer profile: one row per layer (index, kernel, operators), a bar by its
    profile's share when there is one, else by MACs, its number at the bar's end, a hover
    with shapes, dtypes, weights and implementation."""
    layers = report.get("layers") or []
    body = [text(MARGIN, MARGIN + TITLE_FONT, _report_heading(report, "Layers"),
                 font_size=TITLE_FONT, font_weight="bold")]
    y = MARGIN + TITLE_FONT + 8.0
    if not layers:
        body.append(text(MARGIN, y + 14, "no layers in this report (the archive describes "
                         "no calls)", fill=MUTED_COLOUR))
        return svg_document(PICTURE_WIDTH, y + 24 + MARGIN, body, "layers")
    bars = layer_bars(layers)
    total_macs = sum(layer.get("macs") or 0 for layer in layers)
    summary = (f"{len(layers):,} calls · {total_macs:,} MACs · weights "
               f"{bytes_text(sum(la.get('weights_bytes', 0) for la in layers))}")
    caption = f"bar: {bars.caption}"
    lines = [f"{summary} — {caption}"]
    if text_width(lines[0], FONT) > PICTURE_WIDTH - 2 * MARGIN:
        lines = [summary, caption]
    for line in lines:
        body.append(text(MARGIN, y + 12, esc(line), fill=MUTED_COLOUR, class_="summary"))
        y += 18
    y += 2
    families = sorted({implementation_family(str(la.get("implementation", "")))
                       for la in layers}, key=list(IMPLEMENTATION_COLOURS).index)
    drawn, height = legend([LegendItem(f, IMPLEMENTATION_COLOURS[f]) for f in families]
                           + ([LegendItem("MACs", MACS_BAR_COLOUR)] if bars.profiled else []),
                           y)
    body += drawn
    y += height + 4
    widest_text = max(text_width(t, LAYER_FONT) for t in bars.main_texts)
    span = max(MIN_LAYER_BAR_SPAN, PICTURE_WIDTH - MARGIN - LAYER_BAR_X - widest_text - 10)
    largest = (max((v for v in bars.main if v), default=0.0),
               float(max((la.get("macs") or 0 for la in layers), default=0)))
    row_height = ROW_HEIGHT_TWO_BARS if bars.profiled else ROW_HEIGHT
    for row, layer in enumerate(layers):
        body += layer_row(layer, row, y, bars, span, largest, total_macs)
        y += row_height
    return svg_document(PICTURE_WIDTH, y + MARGIN, body, "per-layer profile")


# -- The HTML page --------------------------------------------------------------------------

PAGE_STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial,
       sans-serif; color: #1f2328; margin: 24px auto; max-width: 1240px; padding: 0 16px;
       line-height: 1.4; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #d0d7de; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta, .note { color: #59636e; }
code { font-family: ui-monospace, 'SFMono-Regular', Menlo, Consolas, monospace;
       font-size: 90%; }
.meta code, .note code { overflow-wrap: anywhere; }
.wide { overflow-x: auto; }
.estimate { background: #fff8c5; border: 1px solid #d4a72c; padding: 8px 12px;
            border-radius: 6px; font-weight: 600; }
.totals { display: flex; flex-wrap: wrap; gap: 8px 28px; margin: 12px 0; }
.totals div { white-space: nowrap; }
.totals b { font-size: 17px; }
svg { max-width: 100%; height: auto; display: block; margin: 8px 0; }
.tensors li { padding-left: 1em; text-indent: -1em; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 12px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; vertical-align: top; text-align: left; }
th { background: #f4f6f8; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.num .unit { color: #59636e; }
tr.sum td { background: #f4f6f8; font-weight: 600; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 5px;
          border: 1px solid #b8bec5; vertical-align: baseline; }
.tensors { margin: 0; padding: 0; list-style: none; }
.tensors code, table.layers td > code { white-space: nowrap; }
table.layers { font-size: 12px; }
.over { color: #b42318; font-weight: 600; }
td.category { white-space: nowrap; }
ul.notes { color: #59636e; padding-left: 20px; }
"""


def _cell(content: str, klass: str | None = None, value: int | float | None = None) -> str:
    """A table cell of markup `content`."""
    return f"<td{attributes(class_=klass, data_value=value)}>{content}</td>"


def number_cell(count: int | None, unit: str = "") -> str:
    """A right-aligned number with separators ('—' when unknown); bytes get their KiB too."""
    if count is None:
        return _cell("—", "num")
    shown = f"{count:,}"
    if unit == "B" and abs(count) >= 1024:
        shown += f' <span class="unit">({esc(human_bytes(count))})</span>'
    return _cell(shown, "num", count)


def swatch(colour: str) -> str:
    """A small square of `colour`, as in the pictures' legends."""
    return f'<span class="swatch" style="background:{esc(colour)}"></span>'


def totals_html(report: dict) -> str:
    """The report's totals as a line of large numbers."""
    totals = report.get("totals") or {}
    names = {"flash": ("flash", True), "ram": ("RAM", True), "macs": ("MACs", False),
             "weights_bytes": ("weights", True)}
    items = []
    for key, value in totals.items():
        if not isinstance(value, (int, float)):
            continue
        name, is_bytes = names.get(key, (key, False))
        shown = human_bytes(value) if is_bytes else human_count(value)
        items.append(f'<div title="{esc(f"{value:,}")}">{esc(name)} <b>{esc(shown)}</b>'
                     f' <span class="note">({esc(f"{value:,}")}'
                     f'{" B" if is_bytes else ""})</span></div>')
    return f'<div class="totals">{"".join(items)}</div>' if items else ""


def region_table(region: dict) -> str:
    """A region's blocks: label, category, address, bytes, share, detail; then used and
    free."""
    size, used = region.get("size"), region_used(region)
    whole = size if size else used
    of = "% of region" if size else "% of used"
    rows = [f'<tr><th>block</th><th>category</th><th>address</th><th class="num">bytes</th>'
            f'<th class="num">{of}</th><th>detail</th></tr>']
    for block in ordered_blocks(region.get("blocks") or []):
        count = block.get("bytes", 0)
        category = str(block.get("category", "other"))
        address = block.get("address")
        rows.append("<tr class=\"block\">" + _cell(esc(block.get("label", "")))
                    + _cell(swatch(category_colour(category)) + esc(category), "category")
                    + _cell(f"<code>{hex_address(address)}</code>" if address is not None
                            else "—")
                    + number_cell(count, "B") + _cell(esc(percent(count, whole)), "num")
                    + _cell(esc(block.get("detail", ""))) + "</tr>")
    rows.append('<tr class="sum used">' + _cell("used") + _cell("") + _cell("")
                + number_cell(used, "B") + _cell(esc(percent(used, whole)), "num")
                + _cell("") + "</tr>")
    if size is not None:
        free = size - used
        rows.append(f'<tr class="sum free{" over" if free < 0 else ""}">'
                    + _cell("free" if free >= 0 else "over by") + _cell("") + _cell("")
                    + number_cell(abs(free), "B") + _cell(esc(percent(abs(free), size)), "num")
                    + _cell("") + "</tr>")
        rows.append('<tr class="sum size">' + _cell("size") + _cell("")
                    + _cell(f"<code>{hex_address(region.get('origin') or 0)}</code>")
                    + number_cell(size, "B") + _cell("100.0 %", "num") + _cell("") + "</tr>")
    return "<table class=\"region\">" + "".join(rows) + "</table>"


def region_section(region: dict) -> str:
    sections = region.get("sections") or {}
    sections_line = ('<p class="note">ELF sections here: '
                     + ", ".join(f"<code>{esc(name)}</code> {esc(bytes_text(n))}"
                                 for name, n in sections.items()) + "</p>") if sections else ""
    size = region.get("size")
    summary = (f"{esc(region.get('kind', ''))} · used {esc(bytes_text(region_used(region)))}"
               + (f" of {esc(bytes_text(size))}" if size is not None else " (no fixed size)"))
    if size is not None and region_used(region) > size:
        summary += f' · <span class="over">over by {esc(bytes_text(region_used(region) - size))}'
        summary += "</span>"
    return (f"<h3>{esc(region.get('name', ''))}</h3><p class=\"meta\">{summary}</p>"
            + region_table(region) + sections_line)


def stack_html(stack: dict | None) -> str:
    """The stack line: bound of reserved and the deepest path, or why it is unbounded."""
    if not stack:
        return '<p class="note">no stack figure in this report</p>'
    bound, reserved = stack.get("bound_bytes"), stack.get("reserved_bytes")
    reserved_text = esc(f"{bytes_text(reserved)} reserved" if reserved is not None
                        else "the stack is the operating system's (no fixed reservation)")
    if bound is None:
        reason = stack.get("reason") or "no reason given"
        line = f'<p class="stack"><b>unbounded</b>: {esc(reason)} · {reserved_text}</p>'
    elif reserved is None:
        line = (f'<p class="stack">deepest use at most <b>{esc(bytes_text(bound))}</b>; '
                f"{reserved_text}</p>")
    else:
        share = f" ({esc(percent(bound, reserved))})" if reserved else ""
        over = ' <span class="over">more than reserved</span>' if bound > reserved else ""
        line = (f'<p class="stack">deepest use at most <b>{esc(bytes_text(bound))}</b> of '
                f"{reserved_text}{share}{over}</p>")
        if stack.get("reason"):
            line += f'<p class="note">{esc(stack["reason"])}</p>'
    path = stack.get("path") or []
    if path:
        line += ('<p class="note">deepest path: <code>' + " → ".join(esc(f) for f in path)
                 + "</code></p>")
    return line


def tensors_html(tensors: list[dict]) -> str:
    """A table cell's list of tensors: 'int8 1×49×10×1 · 490 B · input 'input_1''."""
    items = "".join(
        f"<li><code>{esc(t.get('dtype', '?'))} {esc(shape_text(t.get('shape') or []))}</code>"
        f' <span class="note">· {esc(human_bytes(t.get("bytes", 0)).replace(" ", NBSP))}'
        f' · {esc(t.get("where") or t.get("kind", ""))}</span></li>' for t in tensors)
    return f'<ul class="tensors">{items}</ul>' if items else "—"


def layers_table(layers: list[dict]) -> str:
    """Every layer: index, kernel, operators, tensors, MACs, weights, implementation, code
    bytes, and the profile when there is one."""
    with_profile = any(layer.get("profile") for layer in layers)
    shares = profile_shares(layers) if with_profile else [None] * len(layers)
    head = ['<th class="num">#</th><th>kernel</th><th>operators</th><th>inputs</th>'
            '<th>outputs</th><th class="num">MACs</th><th class="num">weights B</th>'
            '<th>implementation</th><th class="num">code B</th>']
    if with_profile:
        head.append('<th class="num">profile</th>')
    rows = ["<tr>" + "".join(head) + "</tr>"]
    for layer, share in zip(layers, shares, strict=True):
        implementation = str(layer.get("implementation", ""))
        cells = [number_cell(layer.get("index")), _cell(f"<code>{esc(layer.get('kernel', ''))}"
                                                        "</code>"),
                 _cell(esc(", ".join(str(o) for o in layer.get("operators") or []))),
                 _cell(tensors_html(layer.get("inputs") or [])),
                 _cell(tensors_html(layer.get("outputs") or [])),
                 number_cell(layer.get("macs")), number_cell(layer.get("weights_bytes", 0)),
                 _cell(swatch(IMPLEMENTATION_COLOURS[implementation_family(implementation)])
                       + esc(implementation)),
                 number_cell(layer.get("code_bytes"))]
        if with_profile:
            measure = profile_measure(layer.get("profile"))
            shown = [percent(share, 1.0)] if share is not None else []
            shown += [measure_text(*measure)] if measure else []
            cells.append(_cell("<br>".join(map(esc, shown)) or "—", "num"))
        rows.append('<tr class="layer">' + "".join(cells) + "</tr>")
    return '<div class="wide"><table class="layers">' + "".join(rows) + "</table></div>"


def notes_html(report: dict) -> str:
    """The report's notes (what it could not tell, and why), when it has any."""
    notes = [note for note in report.get("notes") or [] if note]
    if not notes:
        return ""
    return '<ul class="notes">' + "".join(f"<li>{esc(note)}</li>" for note in notes) + "</ul>"


def html_page(report: dict) -> str:
    """One self-contained page: the heading, the totals, the memory map and its tables, the
    stack line, the per-layer profile and its table. Inline CSS, no script, nothing
    fetched."""
    project = str(report.get("project") or "")
    name = project.rstrip("/").rsplit("/", 1)[-1] or "model"
    board = str(report.get("board") or "?")
    module = report.get("module")
    estimate = (
        '<p class="estimate">Estimate: these figures were not read from a linked firmware; '
        "build the project for exact ones.</p>" if report.get("estimate") else "")
    regions = report.get("regions") or []
    layers = report.get("layers") or []
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(name)} on {esc(board)} — microtvm-gen report"
        f"{' (estimate)' if report.get('estimate') else ''}</title>",
        f"<style>{PAGE_STYLE}</style></head><body>",
        f"<h1>{esc(name)} on {esc(board)}</h1>",
        f'<p class="meta">board <b>{esc(board)}</b> · project <code>{esc(project)}</code>'
        + (f" · module <code>{esc(module)}</code>" if module else "") + "</p>",
        estimate,
        totals_html(report),
        notes_html(report),
        "<h2>Memory</h2>",
        memory_svg(report),
        *(region_section(region) for region in regions),
        "<h2>Stack</h2>",
        stack_html(report.get("stack")),
        "<h2>Layers</h2>",
        layers_svg(report),
        layers_table(layers) if layers else '<p class="note">no layers in this report</p>',
        '<p class="note">Written by <code>microtvm-gen report</code>. Hover a block or a '
        "layer for its details.</p>",
        "</body></html>",
        "",
    ])
