"""What a pause may name: a table the fleet knows (its last plan or probe cache), a source, a
glob matching one, or a Lance table not planned yet. A pause of nothing is refused, never kept
silently (issue 57); this reads the report and the cache, so it sits above both."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from memwal.core.json_doc import list_of, mapping_of
from memwal.errors import BadInputError, MemWalError
from memwal.fleet.cache import ProbeCache
from memwal.fleet.controls import matches
from memwal.fleet.report import last_report
from memwal.fleet.state import FleetState


def check_target(state: FleetState, target: str, *, is_table: Callable[[str], bool],
                 confirmed: bool = False) -> None:
    """Refuse (bad input, nothing written) a pause whose ``target`` names no table: none the
    fleet's last plan or probe cache knows matches it (as the plan matches pauses: a table's URI,
    a source, or a glob), and it is no Lance table either (``is_table(uri)``: one not planned
    yet). A folder that only holds tables is neither: ``<folder>/*`` matches them.

    Without the fleet's key (:func:`memwal.fleet.control_log.authenticated`) a pause is
    unauthenticated, so a fleet-wide one (``*``, or a glob or source that matches every table
    the fleet knows) is refused unless the operator ``confirmed`` it (issue 61)."""
    from memwal.fleet.control_log import authenticated

    report = last_report(state)[0] or {}
    tables = {uri: "" for uri in ProbeCache.of_state(state).known_tables()}
    tables.update({str(r.get("table")): str(r.get("source") or "") for r in list_of(report.get("top"))
                   if isinstance(r, Mapping)})
    for uri, brief in mapping_of(report.get("index")).items():
        if isinstance(brief, list) and len(brief) > 2:
            tables[str(uri)] = str(brief[2] or "")
    sources = {str(x.get("source")) for x in list_of(report.get("sources")) if isinstance(x, Mapping)}
    if target in sources or any(matches(target, uri, source) for uri, source in tables.items()):
        wide = target == "*" or target not in tables and all(matches(target, u, s) for u, s in tables.items())
        if wide and not confirmed and not authenticated():
            raise BadInputError(f"{target}: pauses every table of the fleet ({len(tables)}), and pauses here are "
                                "unauthenticated (no MEMWAL_FLEET_KEY): confirm with --yes (the control DAG: "
                                "confirm_fleet_wide), or set the fleet's key; nothing paused")
        return
    if "://" in target or target.startswith("/"):
        try:
            if is_table(target):
                return
        except MemWalError:
            pass
    under = target.rstrip("/") + "/"
    hint = f"; tables lie under it: {under}* matches them" if any(u.startswith(under) for u in tables) else ""
    raise BadInputError(f"{target}: matches no table of the fleet (none of the {len(tables)} tables its last plan "
                        f"knows, and no Lance table there){hint}: nothing paused")


def is_table(uri: str, storage_options: Mapping[str, str]) -> bool:
    """Whether a Lance table lies at ``uri`` (it has a ``_versions/`` folder; a folder that is
    not there holds none)."""
    from memwal.errors import NotFoundError
    from memwal.store import check_table_uri, open_store

    try:
        return "_versions" in open_store(check_table_uri(uri), dict(storage_options)).list_dirs("")
    except NotFoundError:
        return False


__all__ = ["check_target", "is_table"]
