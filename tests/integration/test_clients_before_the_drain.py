"""What the clients read between a merge and its drain (issue 84, docs/clients.md).

A merged generation stays listed for the reader grace period after its merge (a reader that
listed it may still open it). pylance's list readers (``LsmScanner.from_snapshots`` over the
shard manifests, and a writer's ``lsm_scanner()``) read every listed generation over the base, so
for that period a key the owner updated or deleted on the base shows the generation's value;
memwal's reader applies the merge mark and shows the base's. The drain ends it for every reader.
"""

from __future__ import annotations

import lance
import pyarrow as pa

import memwal
from tests.clients.pylance_client import LiveWriter, client_view


def by_key(rows: list[dict]) -> dict[int, dict]:
    return {r["id"]: r for r in rows}


def test_list_readers_show_merged_generations_over_the_owners_base_writes_until_the_drain(live: LiveWriter) -> None:
    uri = live.uri
    keys = [20_000 + i for i in range(30)]
    live.generation(keys)
    live.close()
    t = memwal.open(uri)
    assert t.merge().ok
    merged = by_key(client_view(uri))
    updated, deleted = keys[1], keys[2]
    assert updated in merged and deleted in merged

    ds = lance.dataset(uri)  # the owner writes the base directly: an update and a delete
    row = ds.to_table(filter=f"id = {updated}").slice(0, 1)
    new = row.set_column(row.schema.get_field_index("name"), "name", pa.array(["owner"], row.schema.field("name").type))
    ds.merge_insert("id").when_matched_update_all().execute(new)
    lance.dataset(uri).delete(f"id = {deleted}")
    live.model.put(new)
    live.model.delete([deleted])

    held = t.gc(writer_idle_seconds=0).value  # within the grace period: the merged generation stays listed
    assert held.drained == () and {b.reason for b in held.blocked} >= {"grace-period"}
    listed = by_key(client_view(uri))  # a list reader: the generation's rows over the base
    assert listed[updated]["name"] == merged[updated]["name"] != "owner" and deleted in listed
    ours = by_key(t.scan().to_pylist())  # memwal's reader: the merge mark, the base's rows
    assert ours[updated]["name"] == "owner" and deleted not in ours

    drained = t.gc(grace_seconds=0, writer_idle_seconds=0).value
    assert drained.drained
    assert client_view(uri) == live.model.sorted_rows() == sorted(t.scan().to_pylist(), key=lambda r: r["id"])
