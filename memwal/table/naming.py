"""Names of MemWAL objects on storage (spec: "WAL Storage Layout", "Shard Manifest Storage Layout").

WAL entries and shard manifest versions are named by the bit-reversed 64-bit binary string of
their number so that sequential writes spread over S3's key space; generation directories are
``<8 hex>_gen_<g>`` so that a failed flush's retry can use a fresh directory.
"""

from __future__ import annotations

import functools
import re
import uuid

MEM_WAL_DIR = "_mem_wal"
JOBS_DIR = f"{MEM_WAL_DIR}/_jobs"
STAGING_DIR = f"{MEM_WAL_DIR}/_staging"
MEM_WAL_INDEX_NAME = "__lance_mem_wal"
#: A file in a generation folder that memwal's rollup wrote (memwal.rollup): what it replaces.
#: Readers ignore it (they open ``_versions/``, the key index and the bloom filter).
ROLLUP_MARKER = "_memwal_rollup.json"
MEM_WAL_DETAILS_TYPE_URL = "/lance.table.MemWalIndexDetails"
U64_MAX = (1 << 64) - 1

# Whole names only (``fullmatch``): ``match`` with ``$`` let a name with a trailing newline through.
_BITREV_RE = re.compile(r"[01]{64}")
_GEN_DIR_RE = re.compile(r"[0-9a-f]{8}_gen_([1-9][0-9]*)")


def bitrev64(n: int) -> str:
    """The 64-character binary string of ``n`` with bit order reversed (1 -> '1000...0')."""
    if not 0 <= n <= U64_MAX:
        raise ValueError(f"{n} is not a u64")
    return format(n, "064b")[::-1]


def parse_bitrev64(name: str) -> int:
    """Inverse of :func:`bitrev64`; raises ValueError for anything that is not 64 binary digits."""
    if not _BITREV_RE.fullmatch(name):
        raise ValueError(f"not a bit-reversed u64 name: {name!r}")
    return int(name[::-1], 2)


def shard_dir(shard_id: str) -> str:
    return f"{MEM_WAL_DIR}/{shard_id}"


def manifest_key(shard_id: str, version: int) -> str:
    return f"{shard_dir(shard_id)}/manifest/{bitrev64(version)}.binpb"


def version_hint_key(shard_id: str) -> str:
    return f"{shard_dir(shard_id)}/manifest/version_hint.json"


def wal_key(shard_id: str, position: int) -> str:
    return f"{shard_dir(shard_id)}/wal/{bitrev64(position)}.arrow"


#: Names a process remembers parsed (a pure function): every job lists a shard's manifest versions
#: and its generation folders, some 3,000 of each half an hour beside a writer that never reopens,
#: and parsing them again took some 4 ms a listing (1 us a name); a lookup is a quarter of that.
PARSED_NAMES = 1 << 15


@functools.lru_cache(maxsize=PARSED_NAMES)
def parse_manifest_name(name: str) -> int | None:
    """The version of a ``<bitrev64>.binpb`` name under a shard's ``manifest/``, or None for another name."""
    stem, dot, ext = name.rpartition(".")
    if not dot or ext != "binpb":
        return None
    try:
        return parse_bitrev64(stem)
    except ValueError:
        return None


def parse_wal_name(name: str) -> int | None:
    """The WAL position of a file name under ``wal/``, or None for a foreign file."""
    stem, dot, ext = name.rpartition(".")
    if not dot or ext not in ("arrow", "lance"):
        return None
    try:
        return parse_bitrev64(stem)
    except ValueError:
        return None


@functools.lru_cache(maxsize=PARSED_NAMES)
def parse_generation_dir(name: str) -> int | None:
    """The generation number of a ``<8 hex>_gen_<g>`` directory name (lowercase hex, ``g`` from 1,
    ASCII digits only), or None."""
    m = _GEN_DIR_RE.fullmatch(name)
    return int(m.group(1)) if m else None


@functools.lru_cache(maxsize=4096)
def is_shard_dir_name(name: str) -> bool:
    """Shard directories are UUIDs; our own folders start with '_' and are never shards.

    Cached: GC checks the shard of every key it deletes, and a table has few shards.
    """
    if name.startswith("_"):
        return False
    try:
        uuid.UUID(name)
    except ValueError:
        return False
    return True


def shard_uuid_str(raw: bytes) -> str:
    """A shard id as Lance prints it, from the 16 bytes of the protobuf UUID message."""
    return str(uuid.UUID(bytes=bytes(raw)))


def shard_uuid_bytes(shard_id: str) -> bytes:
    return uuid.UUID(shard_id).bytes


#: Digits of a V2 manifest name (``u64::MAX - version``, zero-padded): in key order, newest first.
V2_NAME_DIGITS = 20


def table_version_of(name: str) -> int | None:
    """The table version a file name under ``_versions/`` stands for, or None: the one rule of
    every reader of ``_versions/``. As Lance names them: ``<20 digits>.manifest`` is
    ``u64::MAX - version`` (V2), ``<digits>.manifest`` is the version itself (older tables);
    versions start at 1. Anything else (``-1.manifest``, ``"x.manifest``, a stray file) is no
    manifest and changes nothing."""
    digits, _, ext = name.rpartition("/")[2].partition(".")  # no regular expression: 70,000 names a listing
    if ext != "manifest" or not 0 < len(digits) <= V2_NAME_DIGITS or not (digits.isascii() and digits.isdigit()):
        return None
    n = int(digits)
    version = U64_MAX - n if len(digits) == V2_NAME_DIGITS else n
    return version if 0 < version < U64_MAX else None


def table_manifest_key(version: int, *, v2_naming: bool) -> str:
    """Lance names manifests ``u64::MAX - version`` (V2 scheme) or ``version`` (older tables)."""
    name = U64_MAX - version if v2_naming else version
    return f"_versions/{name}.manifest"
