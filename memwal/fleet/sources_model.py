"""What discovery finds (plain data, shared by the root walk and the namespace walk)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memwal.store import ObjectInfo


@dataclass(frozen=True)
class TableRef:
    """A table to maintain: its URI, its storage options, and the source that named it."""

    uri: str
    source: str
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    #: The latest manifest's listing entry, when discovery listed ``_versions/`` (the probe's first read).
    latest: ObjectInfo | None = field(default=None, repr=False, compare=False)
    #: A namespace table's id (its credentials are asked for again by id where the table runs).
    namespace_id: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Skipped:
    """Something a source holds that is not a table to maintain, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class SourceProblem:
    """A source that could not be searched (unreachable, refused), named with the reason."""

    source: str
    error: str


@dataclass(frozen=True)
class Discovery:
    tables: tuple[TableRef, ...]
    skipped: tuple[Skipped, ...]
    problems: tuple[SourceProblem, ...]


__all__ = ["Discovery", "Skipped", "SourceProblem", "TableRef"]
