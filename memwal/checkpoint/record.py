"""What a checkpoint is: the LSM view of one moment, and until when it is pinned.

A checkpoint (SlateDB's, seed 002) names the base-table ``version`` read at its moment and,
per shard, every generation then visible to readers (flushed and above that version's merge
progress) with its path, so a reader can rebuild exactly that view later. It lives at
``_mem_wal/_jobs/checkpoints/<id>.json`` in the table's own store (created with
``put_if_absent``, refreshed with ``put_if_match``), and the base version carries a Lance tag
``memwal-checkpoint-<id>`` so Lance's own cleanup never expires it.

A record states its ``format`` (:data:`FORMAT`; none is 1). One of a newer format, written by a
newer memwal, is not understood here, yet may pin anything: it is read as a checkpoint that is
live whatever its expiry, pins every generation of every shard and every table version
(:attr:`Checkpoint.newer_format`), so GC holds, with the reason ``checkpoint:<id> unknown format
N``, and never removes it. Reading at it or refreshing it is refused (exit 2); an operator's
``memwal checkpoint delete`` removes it, as it removes a corrupt record.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from memwal.core.document import Document
from memwal.core.validate import FLOATS
from memwal.errors import BadInputError
from memwal.table.naming import JOBS_DIR

#: Folder of the checkpoint records.
CHECKPOINT_PREFIX = f"{JOBS_DIR}/checkpoints/"
#: Prefix of the Lance tag that keeps a checkpoint's base version.
TAG_PREFIX = "memwal-checkpoint-"
#: Longest lifetime a checkpoint may ask for (a year): longer is a typo, and an abandoned
#: checkpoint holds storage for all of it. Refresh it instead.
MAX_LIFETIME_SECONDS = 365 * 24 * 3600.0
#: Longest checkpoint name.
MAX_NAME = 200
#: Largest checkpoint record read (a record lists every pinned generation: ~60 bytes each).
RECORD_MAX_BYTES = 64 * 1024 * 1024
#: A checkpoint pinned for longer than this from now is shown as a long pin (status, verify).
LONG_PIN_SECONDS = 7 * 24 * 3600.0

#: The record format this code writes and understands.
FORMAT = 1

_ID_RE = re.compile(r"^[0-9a-f]{32}$")


def lifetime(value: object) -> float:
    """A checkpoint lifetime in seconds (a number, its text or a :class:`~datetime.timedelta`):
    finite, positive, at most a year (exit 2 otherwise)."""
    if isinstance(value, bool):
        raise BadInputError(f"lifetime: expected seconds, got {value!r}")
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if not isinstance(value, FLOATS):
        raise BadInputError(f"lifetime: {value!r} is not a number of seconds")
    try:
        n = float(value)
    except (TypeError, ValueError):
        raise BadInputError(f"lifetime: {value!r} is not a number of seconds") from None
    if not math.isfinite(n) or n <= 0:
        raise BadInputError(f"lifetime: {value!r} must be a positive, finite number of seconds")
    if n > MAX_LIFETIME_SECONDS:
        raise BadInputError(f"lifetime: {value!r} seconds is beyond a year ({MAX_LIFETIME_SECONDS:.0f}); "
                            "take a shorter one and refresh it")
    return n


def checkpoint_id(value: str) -> str:
    """A checkpoint id as the commands print it (32 hex digits); anything else is bad input."""
    if not isinstance(value, str) or not _ID_RE.match(value.strip().lower()):
        raise BadInputError(f"{value!r} is not a checkpoint id (32 hex digits, as `memwal checkpoint list` shows)")
    return value.strip().lower()


def checkpoint_name(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME or not value.isprintable():
        raise BadInputError(f"checkpoint name {value!r}: expected printable text of 1 to {MAX_NAME} characters")
    return value.strip()


def record_key(cid: str) -> str:
    return f"{CHECKPOINT_PREFIX}{cid}.json"


def tag_name(cid: str) -> str:
    return f"{TAG_PREFIX}{cid}"


@dataclass
class PinnedShard:
    """One shard of a checkpoint's view."""

    current_generation: int
    spec_id: int
    #: ``(generation, path)`` of every generation the view reads, ascending (stored as pairs).
    generations: list[tuple[int, str]] = field(default_factory=list)

    @property
    def numbers(self) -> list[int]:
        return [int(g) for g, _ in self.generations]


@dataclass
class Checkpoint(Document):
    """One checkpoint record (see the module docstring)."""

    id: str
    name: str | None
    version: int
    created_at: float
    expires_at: float
    shards: dict[str, PinnedShard]
    tag: str = ""
    #: The expiry the record stated, when it was beyond what any checkpoint may hold (now +
    #: :data:`MAX_LIFETIME_SECONDS`) and :attr:`expires_at` was capped to that on read.
    claimed_expiry: float | None = None
    #: The record's format when newer than :data:`FORMAT` (see the module docstring); then
    #: only ``id`` and ``tag`` are known, and it pins everything.
    newer_format: int | None = None

    def live(self, now: float) -> bool:
        return self.newer_format is not None or self.expires_at > now

    def pins(self, shard_id: str, generation: int) -> bool:
        if self.newer_format is not None:
            return True
        shard = self.shards.get(shard_id)
        return shard is not None and generation in shard.numbers

    def pins_version(self, version: int) -> bool:
        return self.newer_format is not None or version == self.version

    @property
    def gate(self) -> str:
        """The GC gate it is (a blocked generation's reason)."""
        return f"checkpoint:{self.id}" + ("" if self.newer_format is None else f" unknown format {self.newer_format}")

    def understood(self, where: str) -> Checkpoint:
        """Itself, when this code understands its record (else bad input: reading at it or
        refreshing it is for the memwal that wrote it)."""
        if self.newer_format is not None:
            raise BadInputError(f"checkpoint record {where} has format {self.newer_format}, newer than this memwal "
                                f"knows ({FORMAT}): use the memwal that wrote it")
        return self

    def to_dict(self) -> dict[str, Any]:
        """The CLI's document: ``shards`` as ``{shard_id: [generations]}``."""
        return {"id": self.id, "name": self.name, "version": self.version, "created_at": self.created_at,
                "expires_at": self.expires_at, "tag": self.tag,
                "shards": {s: p.numbers for s, p in sorted(self.shards.items())},
                **({"claimed_expiry": self.claimed_expiry} if self.claimed_expiry is not None else {}),
                **({"newer_format": self.newer_format} if self.newer_format is not None else {})}

    def long_pin(self, now: float) -> bool:
        """Whether it pins storage for longer than :data:`LONG_PIN_SECONDS` from ``now`` (one of a
        newer format has no expiry known here)."""
        return self.newer_format is None and self.expires_at - now > LONG_PIN_SECONDS

    def dumps(self) -> bytes:
        if self.newer_format is not None:
            raise BadInputError(f"checkpoint {self.id} has format {self.newer_format}: this memwal cannot write it")
        doc = {**asdict(self), "format": FORMAT}
        doc.pop("claimed_expiry")
        doc.pop("newer_format")
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def loads(cls, data: bytes, *, where: str, cid: str, now: float) -> Checkpoint:
        """Parse the record stored as checkpoint ``cid``; a corrupt one is bad input naming it
        (never guessed at), and so is one whose id is not its file's.

        The record comes from whoever can write the table's storage: an expiry beyond now plus
        the longest lifetime :func:`lifetime` allows is capped to that (and remembered in
        :attr:`claimed_expiry`), so a planted record cannot pin storage for a century."""
        try:
            obj = json.loads(data)
            newer = _newer_format(obj)
            if newer is not None:
                if checkpoint_id(cid) != cid:
                    raise BadInputError(f"{cid!r} is not a checkpoint id")
                return cls(id=cid, name=None, version=-1, created_at=now, expires_at=now + MAX_LIFETIME_SECONDS,
                           shards={}, tag=tag_name(cid), newer_format=newer)
            shards = {str(s): PinnedShard(int(p["current_generation"]), int(p["spec_id"]),
                                          [(int(g), str(path)) for g, path in p["generations"]])
                      for s, p in obj["shards"].items()}
            ckpt = cls(id=checkpoint_id(obj["id"]), name=checkpoint_name(obj.get("name")),
                       version=int(obj["version"]), created_at=float(obj["created_at"]),
                       expires_at=float(obj["expires_at"]), shards=shards, tag=tag_name(obj["id"]))
        except (ValueError, TypeError, KeyError, AttributeError, BadInputError) as exc:
            raise BadInputError(f"corrupt checkpoint record {where}: {exc}") from exc
        if ckpt.id != cid:
            raise BadInputError(f"corrupt checkpoint record {where}: its id {ckpt.id} is not its file's")
        if not (math.isfinite(ckpt.created_at) and math.isfinite(ckpt.expires_at)) or ckpt.version < 0:
            raise BadInputError(f"corrupt checkpoint record {where}: timestamps are not finite")
        if ckpt.expires_at > now + MAX_LIFETIME_SECONDS:
            ckpt.claimed_expiry, ckpt.expires_at = ckpt.expires_at, now + MAX_LIFETIME_SECONDS
        return ckpt


def _newer_format(obj: object) -> int | None:
    """A record's format when newer than :data:`FORMAT` (None: 1, or no format stated); one
    that is not a positive whole number is a corrupt record."""
    fmt = obj.get("format", FORMAT) if isinstance(obj, dict) else FORMAT
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
        raise ValueError(f"format {fmt!r} is not a record format")
    return fmt if fmt > FORMAT else None
