"""What every result and plan is to its reader: the CLI's ``--json`` document.

A result (or plan) says what it is as a dict (:meth:`Document.to_dict`, exactly the
document ``memwal <command> --json`` prints) and, from that, as JSON text
(:meth:`Document.to_json`). One mixin, so the two cannot disagree anywhere.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any


class Document:
    """A value shown as a JSON document: subclasses define :meth:`to_dict`."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self, **dumps: Any) -> str:
        """The same document as JSON text (``json.dumps`` keywords, e.g. ``indent=2``)."""
        return json.dumps(self.to_dict(), default=str, **dumps)


def plain(value: Any) -> Any:
    """``value`` with every tuple made a list, every dataclass a dict (``dataclasses.asdict``
    keeps tuples): the frozen results and plans hold tuples, their documents hold lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def as_document(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as its document (:func:`plain` of ``dataclasses.asdict``)."""
    doc: dict[str, Any] = plain(obj)
    return doc
