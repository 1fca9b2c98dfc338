"""The one YAML reader of the files an operator hands us (policies, DAG configs).

YAML's aliases let a file of about 1 KB stand for billions of values (the "billion laughs":
observed, issue 47, 1.2 GB and more than 60 s in a policy file and in the Airflow fleet
config, which the DAG processor parses). :func:`load_yaml` is ``yaml.safe_load`` with aliases
refused outright (an anchor alone is harmless) and nesting capped at :data:`MAX_DEPTH`
levels, so the value it returns is never larger than the text it read. JSON is YAML, so a
JSON file reads the same.
"""

from __future__ import annotations

from typing import Any

import yaml

#: Deepest nesting of mappings and sequences a config may have (ours need four or five).
MAX_DEPTH = 64


class _BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types here
    """``SafeLoader`` that refuses aliases and caps nesting while it composes the nodes."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed here",
                                              event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str | bytes) -> Any:
    """The document in ``text`` (see the module docstring); ``yaml.YAMLError`` when it is not
    YAML, uses an alias or nests too deep."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except RecursionError:
        raise yaml.YAMLError(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


__all__ = ["MAX_DEPTH", "load_yaml"]
