"""What a matplotlib figure's texts look like once drawn, for the tests of the report's and the
notebook's pictures: every text whole, inside the figure, and clear of the others."""

from __future__ import annotations

import itertools
from unittest import mock

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text
from matplotlib.transforms import Bbox


def drawn_texts(figure) -> list[tuple[str, object]]:
    """Every text the figure draws and its extent in pixels, as its PNG renders it (Agg, 100 dpi)."""
    drawn = []
    draw = Text.draw

    def recording(text, renderer):
        draw(text, renderer)
        if text.get_visible() and text.get_text().strip():
            drawn.append((text.get_text(), text.get_window_extent(renderer)))

    figure.set_dpi(100)
    with mock.patch.object(Text, "draw", recording):
        FigureCanvasAgg(figure).draw()
    return drawn


def text_faults(figure) -> list[str]:
    """What in the figure's text cannot be read whole: cut at its edge, shortened, or drawn over
    another text."""
    texts = drawn_texts(figure)
    width, height = figure.bbox.width, figure.bbox.height
    faults = [
        f"cut: {text!r}"
        for text, box in texts
        if box.x0 < -1 or box.y0 < -1 or box.x1 > width + 1 or box.y1 > height + 1
    ]
    faults += [f"shortened: {text!r}" for text, _ in texts if "…" in text]
    for (a, box_a), (b, box_b) in itertools.combinations(texts, 2):
        overlap = Bbox.intersection(box_a, box_b)
        if overlap is not None and overlap.width > 1 and overlap.height > 1:
            faults.append(f"overlap: {a!r} and {b!r}")
    return faults


def whole(text: str) -> str:
    """Text as it reads once wrapped lines are joined again (wrapping replaces spaces or splits words)."""
    return "".join(text.split())
