"""Every base-table version a reader may still open: main history, branches, tags.

GC gate (c) (invariant 4, docs/architecture.md): time travel to a retained version reads the data
that version had merged, and nothing more, so a generation merged *after* that version
must stay until the version is cleaned up. We read progress straight from each version's
manifest, on the main line and on every branch under ``tree/<branch>/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from memwal.errors import BadInputError
from memwal.table import Table
from memwal.table.manifest import TableManifest, decode_table_manifest, list_versions


@dataclass
class RetainedVersion:
    version: int
    branch: str | None
    manifest: TableManifest
    tags: list[str] = field(default_factory=list)
    child_branches: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """Which version holds the data back, and what holds that version (tag, branch)."""
        where = f"{self.version}" if self.branch is None else f"{self.version} (branch {self.branch})"
        if self.tags:
            where += f" (tag {', '.join(sorted(self.tags))})"
        if self.child_branches:
            where += f" (branch {', '.join(sorted(self.child_branches))} starts here)"
        return where


def _refs(table: Table, kind: str) -> dict[str, dict]:
    """Lance's ``_refs/tags/*.json`` or ``_refs/branches/*.json`` documents by name."""
    out: dict[str, dict] = {}
    for obj in table.store.list(f"_refs/{kind}/", recursive=False):
        name = obj.key.rsplit("/", 1)[-1]
        if name.endswith(".json"):
            try:
                out[name[: -len(".json")]] = json.loads(table.store.get(obj.key))
            except ValueError as exc:
                raise BadInputError(f"{table.store.uri_for(obj.key)}: unreadable {kind} ref: {exc}") from exc
    return out


def _holders(table: Table) -> tuple[dict[tuple[str | None, int], list[str]], dict[tuple[str | None, int], list[str]]]:
    tags: dict[tuple[str | None, int], list[str]] = {}
    branches: dict[tuple[str | None, int], list[str]] = {}
    try:
        for name, doc in _refs(table, "tags").items():
            tags.setdefault((doc.get("branch"), int(doc["version"])), []).append(name)
        for name, doc in _refs(table, "branches").items():
            branches.setdefault((doc.get("parentBranch"), int(doc["parentVersion"])), []).append(name)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputError(f"{table.uri}: unreadable tag or branch reference: {exc}") from exc
    return tags, branches


def retained_versions(table: Table) -> list[RetainedVersion]:
    """All versions whose manifests still exist, oldest first per line of history."""
    tags, branches = _holders(table)
    out: list[RetainedVersion] = []
    lines: list[tuple[str | None, object]] = [(None, table.store)]
    lines += [(b, table.store.child(f"tree/{b}")) for b in table.store.list_dirs("tree/")]
    for branch, store in lines:
        for version, key in sorted(list_versions(store).items()):
            manifest = decode_table_manifest(store.get(key), key=key, where=store.uri_for(key))
            out.append(RetainedVersion(version, branch, manifest, tags.get((branch, version), []),
                                       branches.get((branch, version), [])))
    return out
