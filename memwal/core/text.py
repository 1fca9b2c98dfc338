"""Text read from storage, made safe for where it is shown.

Run records, checkpoints, lease records and names come from whoever can write the table's
storage (DESIGN 3.9). HTML pages escape through Jinja's autoescape and
:func:`markupsafe.escape`; this module is the terminal's side, what both sides drop, and the
length bound shared by both:

- :func:`terminal_safe`: control and format characters (ESC sequences that move the cursor,
  rewrite the title or the clipboard; C1 controls; bidirectional overrides that reorder what is
  read) are shown as visible escapes, never sent raw;
- :func:`page_value`, :func:`html_text`: the same characters in a page (raw ESC, BEL or a
  bidirectional override would reach the reader's copy buffer, or reorder what is read: issue
  61), shown as escapes before HTML escaping; the pages' Jinja environments apply it to every
  value (``finalize``), the charts and the Airflow views to every text they write;
- :func:`clip`: a long text shown whole would bury the rest of the screen or page.
"""

from __future__ import annotations

import unicodedata

#: Longest text from storage a view shows in one place (an error, a name, a reason).
MAX_SHOWN_CHARS = 2000


def _visible(ch: str, keep: str) -> str:
    if ch in keep:
        return ch
    if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
        code = ord(ch)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return ch


def terminal_safe(text: str, *, keep: str = "\n\t") -> str:
    """``text`` with every control or format character except those in ``keep`` shown as an
    escape (``\\x1b``, ``\\u202e``): what reaches a terminal prints, it never acts."""
    if text.isprintable() and not any(ch in "\u2028\u2029" for ch in text):
        return text
    return "".join(_visible(ch, keep) for ch in text)


def one_line(text: str) -> str:
    """:func:`terminal_safe` with newlines and tabs escaped too: a value that cannot forge a
    second log or output line."""
    return terminal_safe(text, keep="")


def page_value(value: object) -> object:
    """A value as a page shows it: text with its control and format characters shown as escapes
    (newlines and tabs kept); markup a view built itself (:class:`markupsafe.Markup`, escaped
    where it was built) and anything else as it is."""
    from markupsafe import Markup

    if isinstance(value, str) and not isinstance(value, Markup):
        return terminal_safe(value)
    return value


def html_text(text: str, *, quote: bool = True) -> str:
    """``text`` for an HTML page written by hand: :func:`page_value`, then HTML-escaped."""
    from html import escape

    return escape(terminal_safe(text), quote=quote)


def clip(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


__all__ = ["MAX_SHOWN_CHARS", "clip", "html_text", "one_line", "page_value", "terminal_safe"]


def span(values: list[int], *, dash: str = "..", sep: str = ",", most: int | None = None) -> str:
    """Numbers as a person reads them: ``-`` for none, ``a..b`` for a run without a gap, else
    listed (at most ``most``). A run is told by its neighbours, never by building the range:
    the numbers come from storage (issue 56)."""
    if not values:
        return "-"
    if all(b - a == 1 for a, b in zip(values, values[1:], strict=False)):
        return str(values[0]) if len(values) == 1 else f"{values[0]}{dash}{values[-1]}"
    shown = values if most is None else values[:most]
    return sep.join(map(str, shown)) + (" …" if len(shown) < len(values) else "")
