"""What every result and plan is to its reader: the CLI's ``--json`` document.

A result (or plan) says what it is as a dict (:meth:`Document.to_dict`, exactly the
document ``memwal <command> --json`` prints) and, from that, as JSON text
(:meth:`Document.to_json`). One mixin, so the two cannot disagree anywhere.
"""

from __future__ import annotations

import json
from typing import Any


class Document:
    """A value shown as a JSON document: subclasses define :meth:`to_dict`."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self, **dumps: Any) -> str:
        """The same document as JSON text (``json.dumps`` keywords, e.g. ``indent=2``)."""
        return json.dumps(self.to_dict(), default=str, **dumps)
