"""``memwal merge-ops``: change a table's merge operators, safely.

A change of operators changes the meaning of rows not merged yet, so it needs the table's
state (how many generations are pending) and the merge lease: it sits above both the
merge operators themselves (:mod:`memwal.merge.ops`) and the status (:mod:`memwal.inspect`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memwal.core.document import Document
from memwal.errors import BadInputError
from memwal.inspect.status import table_status
from memwal.lease import Lease
from memwal.merge.ops import CONFIG_PREFIX, FIELD_ID_PREFIX, from_config, resolved_keys, table_ops, validate
from memwal.table import Table
from memwal.table.schema import primary_key_of


@dataclass
class MergeOpsChange(Document):
    """What ``memwal merge-ops`` did (or, with nothing to change, shows)."""

    table: str
    version: int | None
    merge_ops: dict[str, str]
    changed: dict[str, str | None]
    unmerged_generations: int

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "version": self.version, "merge_ops": self.merge_ops,
                "changed": self.changed, "unmerged_generations": self.unmerged_generations}


def change_merge_ops(table: Table, *, set_ops: Mapping[str, str] | None = None, unset: list[str] | None = None,
                     force: bool = False, lease_ttl: float = 300.0) -> MergeOpsChange:
    """Validate then commit a change of operators (one UpdateConfig commit), under the merge lease.

    A change alters the meaning of rows not merged yet (a counter's deltas would be
    replaced, or replaced values summed), so it is refused while generations are pending
    unless ``force``. The merge lease keeps memwal's own mergers from folding a batch
    under the old operators and committing it after the change.
    """
    set_ops, unset = dict(set_ops or {}), list(unset or [])
    ds = table.dataset()
    try:
        current = table_ops(ds)
    except BadInputError:
        if not unset:
            raise
        current = from_config(ds.config())  # an operator on a vanished column: let --unset remove it
    both = set(set_ops) & set(unset)
    if both:
        raise BadInputError(f"column {sorted(both)[0]}: both set and unset")
    validate(set_ops, ds.schema, primary_key_of(table, ds))
    for column in unset:
        if column not in ds.schema.names and column not in current.ops:
            raise BadInputError(f"column {column}: not in the table schema")
    changed: dict[str, str | None] = {c: op for c, op in set_ops.items() if current.op(c) != op}
    changed.update({c: None for c in unset if c in current.ops})
    status = table_status(table)
    pending = status.unmerged_generations
    if not changed:
        return MergeOpsChange(table.uri, None, current.to_dict(), {}, pending)
    if pending and not force:
        raise BadInputError(
            f"{table.uri}: {pending} unmerged generations would change meaning under the new merge operators; "
            "merge them first or pass --force"
        )
    with Lease(table.store, "merge", ttl_seconds=lease_ttl) as lease:
        lease.check()
        ds = table.dataset()
        ids = {f.name(): f.id() for f in ds.lance_schema.fields()}
        config = ds.config()
        # Every key now applying to a changed column goes (one the column had under an
        # older name too); a set operator is recorded with the column's field id.
        owners = resolved_keys(config, {fid: name for name, fid in ids.items()}, strict=False)
        stale = {k for k, column in owners.items() if column in changed} | {c for c in changed if c in owners}
        values: dict[str, str | None] = {}
        for c, op in changed.items():
            if op is not None and op != "replace":
                values[f"{CONFIG_PREFIX}{c}"] = op
                values[f"{FIELD_ID_PREFIX}{c}"] = str(ids[c])
        drops = [f"{prefix}{k}" for k in sorted(stale) for prefix in (CONFIG_PREFIX, FIELD_ID_PREFIX)
                 if f"{prefix}{k}" in config and f"{prefix}{k}" not in values]
        if drops:
            ds.delete_config_keys(drops)
        if values:
            ds = table.dataset()
            ds.update_config(values)
        after = table.dataset()
    return MergeOpsChange(table.uri, after.version, table_ops(after).to_dict(), changed, pending)
