"""The table: its handle (URI, storage options, store, Lance dataset) and what is on storage.

- :mod:`memwal.table.handle`: :class:`Table` and :func:`open_table` (also importable from here);
- :mod:`memwal.table.naming`, :mod:`memwal.table.paths`: the MemWAL's storage layout, and the
  rule that a path read from a manifest is data, not trust (invariant 5);
- :mod:`memwal.table.manifest`: table manifests and the MemWAL index details;
- :mod:`memwal.table.shards`: shard manifests, WAL entries and generation directories;
- :mod:`memwal.table.generations`: whether a generation's files can be read;
- :mod:`memwal.table.sharding`: shard specs and Lance's own routing;
- :mod:`memwal.table.retained`: every version a reader may still open (main, branches, tags).

The handle is imported lazily: the layout modules are needed below the store layer.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the checker sees; at run time __getattr__ imports the handle on first use
    from memwal.table.handle import OWN_FOLDERS, Table, check_own_folders, open_table

__all__ = ["Table", "open_table", "check_own_folders", "OWN_FOLDERS"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from memwal.table import handle

        return getattr(handle, name)
    raise AttributeError(f"module 'memwal.table' has no attribute {name!r}")
