"""Moved to :mod:`memwal.store` (kept for modules of other branches until they import from there)."""

from memwal.store import TEMP_MARKER, LocalStore, ObjectInfo, Store, check_table_uri, open_store

__all__ = ["TEMP_MARKER", "LocalStore", "ObjectInfo", "Store", "check_table_uri", "open_store"]
