"""Where a fleet's tables come from, and finding them.

A source is one of:

- a table URI (``/data/t``, ``s3://bucket/t``): that table;
- a root URI: every table below it, at any depth (a folder holding ``_versions/`` is a Lance
  table; nothing inside a table is searched further);
- ``namespace:dir`` or ``namespace:rest``: every table of a Lance Namespace (pylance's
  ``DirectoryNamespace``, or a bounded client of the REST protocol), nested namespaces
  included, every location under a root's rules (:mod:`memwal.fleet.namespaces`);
- the lines of a tables file (as ``memwal backfill --tables-file``).

Discovery is link-safe: it lists through the store interface, which never follows a link,
and a link met under a root is reported as skipped, never entered. Whether a Lance table has
a MemWAL is decided by reading it (:mod:`memwal.fleet.probe`); folders with no table are
skipped with the reason, and so is a folder whose name no object key may hold. Every table
URI is normalised once (``t``, ``./t``, ``t/../t`` and ``file:///abs/t`` are one table). A
source that yields no table is bad input; a line of a tables file that yields none is a
problem of that table alone (a dropped table).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence

from memwal.errors import BadInputError, MemWalError, first_line
from memwal.fleet.namespaces import NAMESPACE_PREFIX, namespace_roots, namespace_tables, under, vended_options
from memwal.fleet.sources_model import Discovery, Skipped, SourceProblem, TableRef

#: Deepest folder level searched under a root (a deeper tree is reported, not walked).
MAX_DEPTH = 16
#: Folders inside a Lance table; a root that is itself a table is its own only table.
_TABLE_MARKER = "_versions"


def _is_uri(text: str) -> bool:
    return "://" in text


def discover(sources: Sequence[str], *, storage_options: Mapping[str, str] | None = None,
             namespace_properties: Mapping[str, str] | None = None, known: Collection[str] = (),
             exclude: Collection[str] = (), listed: Collection[str] = ()) -> Discovery:
    """Every table the ``sources`` hold (each table once, by its normalised URI, in the order
    found). A folder under a root whose URI is in ``known`` (tables an earlier plan found) is
    taken as a table without listing it again: the probe's listing of its ``_versions/`` tells
    if it still is one. A folder in ``exclude`` (the fleet's own state) is skipped. A source in
    ``listed`` (a line of a tables file) that holds no table is a problem of that table alone
    (a dropped table), not bad input."""
    if not sources:
        raise BadInputError("no source given: pass table or root URIs, namespace:dir|rest, or --tables-file")
    tables: dict[str, TableRef] = {}
    skipped: list[Skipped] = []
    problems: list[SourceProblem] = []
    for source in sources:
        before = len(skipped)
        try:
            found = list(_search(source, dict(storage_options or {}), dict(namespace_properties or {}), skipped,
                                 frozenset(known), frozenset(e.rstrip("/") for e in exclude)))
        except BadInputError:
            raise
        except (MemWalError, OSError, ValueError, RuntimeError) as exc:
            problems.append(SourceProblem(source, first_line(exc)))
            continue
        if not found and source in listed:
            problems.append(SourceProblem(source, "no Lance table here (dropped?)"))
            continue
        if not found:
            seen = "; ".join(f"{s.path}: {s.reason}" for s in skipped[before:before + 3])
            raise BadInputError(f"source {source}: holds no Lance table" + (f" ({seen})" if seen else ""))
        for ref in found:
            tables.setdefault(ref.uri, ref)
    return Discovery(tuple(tables.values()), tuple(skipped), tuple(problems))


def source_roots(source: str, namespace_properties: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The prefixes every table of ``source`` lies under: the source itself (a table or a
    root), or a namespace's roots (:func:`memwal.fleet.namespaces.namespace_roots`)."""
    from memwal.store.uri import check_table_uri, normalise_table_uri

    if source.startswith(NAMESPACE_PREFIX):
        return namespace_roots(source, dict(namespace_properties or {}))
    return (normalise_table_uri(check_table_uri(source)),)


def source_of(sources: Sequence[tuple[str, Mapping[str, str]]], uri: str, prefer: str | None = None) -> str | None:
    """The first of ``sources`` (source, namespace properties) that holds the table ``uri``
    (``prefer`` first, when it is one of them): checked against each source's roots, so a
    URI read from storage (a report's row, an event) never opens a table with the storage
    options of a source that does not hold it. None: no source holds it."""
    from memwal.store.uri import check_table_uri, normalise_table_uri

    try:
        table = normalise_table_uri(check_table_uri(uri))
    except BadInputError:
        return None
    ordered = sorted(sources, key=lambda s: s[0] != prefer)
    for source, properties in ordered:
        try:
            roots = source_roots(source, properties)
        except BadInputError:
            continue
        if any(under(table, root) for root in roots):
            return source
    return None


def _search(source: str, options: dict[str, str], ns_properties: dict[str, str],
            skipped: list[Skipped], known: frozenset[str], exclude: frozenset[str]) -> Iterator[TableRef]:
    if source.startswith(NAMESPACE_PREFIX):
        yield from namespace_tables(source, ns_properties, skipped)
        return
    from memwal.store.uri import check_table_uri, normalise_table_uri

    yield from _walk(normalise_table_uri(check_table_uri(source)), source, options, skipped, known, exclude)


def _walk(root: str, source: str, options: dict[str, str], skipped: list[Skipped],
          known: frozenset[str], exclude: frozenset[str]) -> Iterator[TableRef]:
    """Tables at or under ``root``, never through a link: a folder below the root is first
    asked for its ``_versions/`` listing (a table answers with its latest manifest, which the
    probe then reads without listing again), any other is listed for its children; a folder
    whose name no key may hold (a backslash, a control character) is skipped."""
    from memwal.fleet.probe import latest_manifest
    from memwal.store import open_store
    from memwal.store.base import clean_key

    store = open_store(root, options)
    base = root.rstrip("/")
    pending: list[tuple[str, int]] = [("", 0)]
    while pending:
        prefix, depth = pending.pop()
        where = f"{base}/{prefix}".rstrip("/")
        if prefix and where in known:
            yield TableRef(where, source, options)
            continue
        if where in exclude:
            skipped.append(Skipped(where, "the fleet's own state"))
            continue
        for link in store.list_links(prefix, recursive=False):
            skipped.append(Skipped(f"{base}/{link}", "a symbolic link: never followed"))
        if prefix:
            latest = latest_manifest(store, prefix)
            if latest is not None:
                yield TableRef(where, source, options, latest=latest)
                continue
        children = store.list_dirs(prefix)
        if _TABLE_MARKER in children:
            yield TableRef(where, source, options)
            continue
        if not children:
            if prefix:
                skipped.append(Skipped(where, "no Lance table in it"))
            continue
        if depth >= MAX_DEPTH:
            skipped.append(Skipped(where, f"deeper than {MAX_DEPTH} folders: not searched"))
            continue
        for child in reversed(children):
            try:
                clean_key(f"{prefix}{child}")
            except BadInputError:
                skipped.append(Skipped(f"{where}/{child}", "a name no object key may hold (a backslash or a control "
                                                            "character): not searched"))
                continue
            pending.append((f"{prefix}{child}/", depth + 1))


__all__ = ["NAMESPACE_PREFIX", "Discovery", "Skipped", "SourceProblem", "TableRef", "discover", "source_of",
           "source_roots", "vended_options"]
