"""The report's colours, declared once: Okabe & Ito's colour-blind-safe set (Okabe, Ito,
"Color Universal Design", 2008) for series, plus greys for context.

Why this set: its eight colours stay apart in protanopia, deuteranopia and tritanopia
(tests/page_checks.py measures every chart's series in simulated colour-blind vision), where
the old green / orange pair for graph / eager merged for red-green colour-blind readers.
A meaning keeps its colour across charts: graph-served = bluish green, eager = vermillion,
KV pool = blue, capture memory = vermillion (it is what graphs cost), recommended = green.
"""

from __future__ import annotations

BLACK = "#000000"
ORANGE = "#e69f00"
SKY_BLUE = "#56b4e9"
BLUISH_GREEN = "#009e73"
YELLOW = "#f0e442"
BLUE = "#0072b2"
VERMILLION = "#d55e00"
REDDISH_PURPLE = "#cc79a7"

DARK_GREY = "#404040"
GREY = "#595959"
NEAR_BLACK = "#222222"
LIGHT_GREY = "#adb5bd"
PALE_GREY = "#e6e6e6"

#: darker shades for text on white (annotation labels), same hue as the series they name
TEXT_GREEN = "#00785a"
TEXT_VERMILLION = "#a84a00"

#: a background band behind the captured window / capture memory share (not a series)
WINDOW_BAND = "#cdeee4"
CAPTURE_BAND = "#f6d2b8"

#: categorical series with no fixed meaning (capture phases per rank), in this order
SERIES = (BLUE, ORANGE, REDDISH_PURPLE, BLUISH_GREEN, SKY_BLUE, VERMILLION, YELLOW, BLACK)
