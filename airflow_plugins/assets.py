"""The Airflow Asset of a MemWAL table's merged data, and the event a merge emits on it.

A merge that committed a new table version attaches an event for the table's Asset to the
operator's ``AssetAlias``: downstream DAGs scheduled on ``table_asset(uri)`` run on fresh
data, and runs that merged nothing emit nothing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, BaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The alias the merge and maintenance operators put in their outlets by default.
DEFAULT_MERGED_ALIAS = "memwal-merged"
MERGED_ASSET_GROUP = "asset"  # the group Airflow gives assets created through an alias


def table_asset(table_uri: str) -> Asset:
    """The Airflow Asset that stands for "merged data of this MemWAL table".

    An event is emitted on it (through an ``AssetAlias``, see ``MemWalMergeOperator``)
    each time a merge commits, so downstream DAGs can use ``schedule=[table_asset(uri)]``.
    The URI keeps the table's location under a ``memwal+`` scheme (``memwal+s3://b/p``,
    ``memwal+file:///data/t``) so it never collides with an asset for the raw files.
    """
    uri = table_uri.rstrip("/") or table_uri
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        asset_uri = f"memwal+{scheme.lower()}://{rest}"
    else:
        asset_uri = f"memwal+file://{os.path.abspath(uri)}"
    return Asset(name=f"memwal:{uri}", uri=asset_uri, group=MERGED_ASSET_GROUP)


def emit_merged_event(op: BaseOperator, alias: str | None, dry_run: bool, doc: dict[str, Any], uri: str,
                      context: Context) -> None:
    """An event for the table's Asset when (and only when) a merge committed a version."""
    if dry_run or doc.get("version") is None:
        op.log.info("nothing merged: no asset event")
        return
    if not alias:
        return
    events = context.get("outlet_events") if hasattr(context, "get") else None
    if events is None:
        op.log.info("no outlet events in this context: asset event for version %s not emitted", doc["version"])
        return
    asset = table_asset(uri)
    extra = {
        "table": uri,
        "version": doc["version"],
        "engine": doc.get("engine"),
        "shards": {s["shard_id"]: s["to_generation"] for s in doc.get("shards", [])},
    }
    events[AssetAlias(alias)].add(asset, extra=extra)
    op.log.info("merge committed version %s: asset event on %s", doc["version"], asset.uri)
