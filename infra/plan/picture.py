"""The memory plan as an SVG picture: one bar per device, as `llm-infra plan` draws them in text.

Standard library only, and deterministic: the same plan gives the same bytes (fixed number
formats, no time, no random ids), so the picture is checked in beside the docs and a test finds
it stale like the page.
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from infra.plan.report import Device, Plan, gib, usage_text

BAR_X = 8
BAR_WIDTH = 560
BAR_HEIGHT = 20
ROW_HEIGHT = 52
WIDTH = 800
"""The bar, then room for the usage text beside it."""
LABEL_MIN_WIDTH = 70
"""A segment narrower than this keeps its figure in its tooltip only."""

ITEM_LABELS = {
    "weights": "weights",
    "repacked_weights": "repacked weights",
    "model_files": "model files",
    "kv_cache": "KV cache",
    "cpu_kv_tier": "CPU KV tier",
    "compute": "compute buffers",
    "activations": "activations",
    "prompt_cache": "prompt cache",
    "runtime": "runtime",
    "os": "OS",
    "image": "image",
    "reserve": "reserve",
    "headroom": "headroom",
    "draft": "speculative draft",
}
"""How the picture names each plan item (another item: its key with spaces)."""

ITEM_COLOURS = {
    "weights": "#4e79a7",
    "repacked_weights": "#76a4d1",
    "model_files": "#76b7b2",
    "kv_cache": "#f28e2b",
    "cpu_kv_tier": "#ffbe7d",
    "compute": "#59a14f",
    "activations": "#8cd17d",
    "prompt_cache": "#b6992d",
    "runtime": "#9c755f",
    "os": "#bab0ac",
    "image": "#86bcb6",
    "reserve": "#d4a6c8",
    "headroom": "#d4a6c8",
    "draft": "#ff9da7",
}
OTHER_COLOUR = "#79706e"
FREE_COLOUR = "#f2f2f2"
OVER_COLOUR = "#e15759"


def item_label(item: str) -> str:
    """The name of a plan item in the picture."""
    return ITEM_LABELS.get(item, item.replace("_", " "))


def figure(size_bytes: float) -> str:
    """A size in GiB as the picture labels it: two decimals, always."""
    return f"{gib(size_bytes):.2f}"


def _n(value: float) -> str:
    """A coordinate: two decimals, so the same plan always gives the same text."""
    return f"{value:.2f}"


def _text(x: float, y: float, text: str, css: str, anchor: str = "start") -> str:
    return (
        f'<text class="{css}" x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}">{escape(text)}</text>'
    )


def _segment(x: float, y: float, width: float, css: str, item: str, size: float) -> list[str]:
    """One item's share of a bar: `data-item` is the plan's key, the label its name."""
    name = "free" if item == "free" else item_label(item)
    colour = FREE_COLOUR if item == "free" else ITEM_COLOURS.get(item, OTHER_COLOUR)
    title = f"{name}: {figure(size)} GiB"
    lines = [
        f'<rect class="{css}" x="{_n(x)}" y="{_n(y)}" width="{_n(width)}" '
        f'height="{BAR_HEIGHT}" fill="{colour}" data-item={quoteattr(item)} '
        f'data-gib="{figure(size)}"><title>{escape(title)}</title></rect>'
    ]
    if width >= LABEL_MIN_WIDTH:
        lines.append(_text(x + 4, y + 14, f"{name} {figure(size)}", f"{css}-label"))
    return lines


def device_label(name: str, device: Device) -> str:
    """`vram:worker — layers 0-21`: the device's name in the plan, and its layers."""
    return name if device.layers is None else f"{name} — {device.layers}"


def _device_group(name: str, device: Device, top: float) -> list[str]:
    capacity = device.capacity_bytes
    used = device.used_bytes
    scale = BAR_WIDTH / max(used, capacity or 0, 1)
    bar_y = top + 18
    lines = [
        f'<g class="device" data-device={quoteattr(name)} data-used-gib="{figure(used)}" '
        f'data-capacity-gib="{"" if capacity is None else figure(capacity)}">',
        _text(BAR_X, top + 12, device_label(name, device), "device-label"),
    ]
    x = float(BAR_X)
    for item, size in device.items.items():
        if size <= 0:
            continue
        width = size * scale
        lines += _segment(x, bar_y, width, "item", item, size)
        x += width
    if capacity is not None and used < capacity:
        lines += _segment(x, bar_y, (capacity - used) * scale, "free", "free", capacity - used)
    if capacity is not None and used > capacity:
        # Scaled to the use: what lies beyond the capacity line does not fit.
        edge = BAR_X + capacity * scale
        lines.append(
            f'<rect class="over" x="{_n(edge)}" y="{_n(bar_y - 3)}" '
            f'width="{_n(BAR_X + BAR_WIDTH - edge)}" height="{BAR_HEIGHT + 6}" fill="none" '
            f'stroke="{OVER_COLOUR}" stroke-width="2" data-gib="{figure(used - capacity)}">'
            f"<title>over by {figure(used - capacity)} GiB</title></rect>"
        )
    lines += [
        f'<rect class="outline" x="{BAR_X}" y="{_n(bar_y)}" width="{BAR_WIDTH}" '
        f'height="{BAR_HEIGHT}" fill="none" stroke="#555555"/>',
        _text(BAR_X + BAR_WIDTH + 8, bar_y + 14, usage_text(device), "usage"),
        "</g>",
    ]
    return lines


def plan_svg(plan: Plan, title: str) -> str:
    """The plan's devices as bars (each item's share, free space, what is over), a legend
    of the items shown, and the verdict; every figure in GiB as `llm-infra plan` gives it."""
    rows = list(plan.devices.items())
    verdict = "fits" if plan.fits else "DOES NOT FIT"
    body = [_text(BAR_X, 20, f"{title}: {verdict}", "title")]
    top = 32.0
    for name, device in rows:
        body += _device_group(name, device, top)
        top += ROW_HEIGHT
    shown = dict.fromkeys(
        item for _, device in rows for item, size in device.items.items() if size > 0
    )
    legend = [(item_label(i), ITEM_COLOURS.get(i, OTHER_COLOUR)) for i in shown]
    legend = list(dict.fromkeys(legend))
    legend.append(("free", FREE_COLOUR))
    x = float(BAR_X)
    body.append('<g class="legend">')
    for label, colour in legend:
        body.append(
            f'<rect x="{_n(x)}" y="{_n(top + 4)}" width="12" height="12" fill="{colour}" '
            'stroke="#555555"/>'
        )
        body.append(_text(x + 16, top + 14, label, "legend-label"))
        x += 24 + 7 * len(label)
    body.append("</g>")
    height = top + 28
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{_n(height)}" '
        f'viewBox="0 0 {WIDTH} {_n(height)}" role="img" aria-label={quoteattr(title)}>',
        "<style>text { font-family: sans-serif; font-size: 12px; fill: #222222; } "
        ".title { font-size: 14px; font-weight: bold; } "
        ".item-label { fill: #111111; font-size: 11px; } "
        ".free-label { fill: #555555; font-size: 11px; }</style>",
        f'<rect width="{WIDTH}" height="{_n(height)}" fill="#ffffff"/>',
    ]
    return "\n".join([*head, *body, "</svg>"]) + "\n"
