"""Where a fleet's tables come from, and finding them.

A source is one of:

- a table URI (``/data/t``, ``s3://bucket/t``): that table;
- a root URI: every table below it, at any depth (a folder holding ``_versions/`` is a Lance
  table; nothing inside a table is searched further);
- ``namespace:dir`` or ``namespace:rest``: every table of a Lance Namespace (pylance's
  ``DirectoryNamespace`` / ``RestNamespace``, with the properties those take), nested
  namespaces included;
- the lines of a tables file (as ``memwal backfill --tables-file``).

Discovery is link-safe: it lists through the store interface, which never follows a link,
and a link met under a root is reported as skipped, never entered. A folder below a root is
first asked for its ``_versions/`` listing: a table answers with its latest manifest, which
the probe then reads without listing again (one request a table, discovery included); any
other folder is then listed for its children. Whether a Lance table has
a MemWAL is decided by reading it (:mod:`memwal.fleet.probe`); folders with no table are
skipped with the reason. A source that yields no table is bad input.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memwal.errors import BadInputError, MemWalError, first_line

if TYPE_CHECKING:
    from lance_namespace import LanceNamespace

    from memwal.store import ObjectInfo

#: Deepest folder level searched under a root (a deeper tree is reported, not walked).
MAX_DEPTH = 16
NAMESPACE_PREFIX = "namespace:"
NAMESPACE_IMPLS = ("dir", "rest")
#: Folders inside a Lance table; a root that is itself a table is its own only table.
_TABLE_MARKER = "_versions"


@dataclass(frozen=True)
class TableRef:
    """A table to maintain: its URI, its storage options, and the source that named it."""

    uri: str
    source: str
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    #: The latest manifest's listing entry, when discovery listed ``_versions/`` (the probe's first read).
    latest: ObjectInfo | None = field(default=None, repr=False, compare=False)
    #: A namespace table's id (its credentials are asked for again by id where the table runs).
    namespace_id: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Skipped:
    """Something a source holds that is not a table to maintain, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class SourceProblem:
    """A source that could not be searched (unreachable, refused), named with the reason."""

    source: str
    error: str


@dataclass(frozen=True)
class Discovery:
    tables: tuple[TableRef, ...]
    skipped: tuple[Skipped, ...]
    problems: tuple[SourceProblem, ...]


def _is_uri(text: str) -> bool:
    return "://" in text


def discover(sources: Sequence[str], *, storage_options: Mapping[str, str] | None = None,
             namespace_properties: Mapping[str, str] | None = None, known: Collection[str] = (),
             exclude: Collection[str] = ()) -> Discovery:
    """Every table the ``sources`` hold (each table once, in the order found). A folder under a
    root whose URI is in ``known`` (tables an earlier plan found) is taken as a table without
    listing it again: the probe's listing of its ``_versions/`` tells if it still is one. A
    folder in ``exclude`` (the fleet's own state) is skipped."""
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
        if not found:
            seen = "; ".join(f"{s.path}: {s.reason}" for s in skipped[before:before + 3])
            raise BadInputError(f"source {source}: holds no Lance table" + (f" ({seen})" if seen else ""))
        for ref in found:
            tables.setdefault(ref.uri, ref)
    return Discovery(tuple(tables.values()), tuple(skipped), tuple(problems))


def _search(source: str, options: dict[str, str], ns_properties: dict[str, str],
            skipped: list[Skipped], known: frozenset[str], exclude: frozenset[str]) -> Iterator[TableRef]:
    if source.startswith(NAMESPACE_PREFIX):
        yield from _namespace_tables(source, ns_properties)
        return
    yield from _walk(source, options, skipped, known, exclude)


def _walk(root: str, options: dict[str, str], skipped: list[Skipped], known: frozenset[str],
          exclude: frozenset[str]) -> Iterator[TableRef]:
    """Tables at or under ``root`` (see the module docstring), never through a link."""
    from memwal.fleet.probe import latest_manifest
    from memwal.store import open_store

    store = open_store(root, options)
    base = root.rstrip("/")
    pending: list[tuple[str, int]] = [("", 0)]
    while pending:
        prefix, depth = pending.pop()
        where = f"{base}/{prefix}".rstrip("/")
        if prefix and where in known:
            yield TableRef(where, root, options)
            continue
        if where in exclude:
            skipped.append(Skipped(where, "the fleet's own state"))
            continue
        for link in store.list_links(prefix, recursive=False):
            skipped.append(Skipped(f"{base}/{link}", "a symbolic link: never followed"))
        if prefix:
            latest = latest_manifest(store, prefix)
            if latest is not None:
                yield TableRef(where, root, options, latest=latest)
                continue
        children = store.list_dirs(prefix)
        if _TABLE_MARKER in children:
            yield TableRef(where, root, options)
            continue
        if not children:
            if prefix:
                skipped.append(Skipped(where, "no Lance table in it"))
            continue
        if depth >= MAX_DEPTH:
            skipped.append(Skipped(where, f"deeper than {MAX_DEPTH} folders: not searched"))
            continue
        pending += [(f"{prefix}{child}/", depth + 1) for child in reversed(children)]


def _namespace_tables(source: str, properties: dict[str, str]) -> Iterator[TableRef]:
    """Every table of a Lance Namespace (``namespace:dir`` or ``namespace:rest``), nested
    namespaces included, with the location and storage options ``describe_table`` gives."""
    from lance_namespace import DescribeTableRequest, ListNamespacesRequest, ListTablesRequest

    ns = _namespace(source, properties)
    pending: list[list[str]] = [[]]
    while pending:
        path = pending.pop()

        def children(token: str | None, p: list[str] = path) -> Any:
            return ns.list_namespaces(ListNamespacesRequest(id=p, page_token=token))

        def tables(token: str | None, p: list[str] = path) -> Any:
            return ns.list_tables(ListTablesRequest(id=p, page_token=token))

        for name in _paged(children):
            pending.append([*path, name])
        for name in _paged(tables):
            described = ns.describe_table(DescribeTableRequest(id=[*path, name], with_table_uri=True))
            location = described.table_uri or described.location
            if location:
                yield TableRef(str(location), source, dict(described.storage_options or {}),
                               namespace_id=(*path, name))


def _namespace(source: str, properties: Mapping[str, str]) -> LanceNamespace:
    """The Lance Namespace a ``namespace:dir`` / ``namespace:rest`` source names."""
    from lance.namespace import DirectoryNamespace, RestNamespace

    impl = source.removeprefix(NAMESPACE_PREFIX)
    if impl not in NAMESPACE_IMPLS:
        raise BadInputError(f"source {source}: expected namespace:{' or namespace:'.join(NAMESPACE_IMPLS)}")
    needed = "root" if impl == "dir" else "uri"
    if needed not in properties:
        raise BadInputError(f"source {source}: needs the namespace property {needed} (--namespace-property "
                            f"{needed}=...)")
    ns: LanceNamespace = (DirectoryNamespace(**properties) if impl == "dir"  # type: ignore[no-untyped-call]
                          else RestNamespace(**properties))  # type: ignore[no-untyped-call]
    return ns


def vended_options(source: str, properties: Mapping[str, str], table_id: Sequence[str]) -> dict[str, str]:
    """The storage options (credentials included) a namespace vends for one table now: asked
    again where the table runs, since vended credentials are short-lived and never travel."""
    from lance_namespace import DescribeTableRequest

    described = _namespace(source, properties).describe_table(DescribeTableRequest(id=list(table_id)))
    return {str(k): str(v) for k, v in dict(described.storage_options or {}).items()}


def _paged(call: Callable[[str | None], Any]) -> Iterator[str]:
    """Every name of a paged namespace listing (its namespaces or its tables)."""
    token: str | None = None
    while True:
        page = call(token)
        names: list[str] = list(page.namespaces if hasattr(page, "namespaces") else page.tables)
        yield from names
        token = getattr(page, "page_token", None)
        if not token:
            return


__all__ = ["NAMESPACE_PREFIX", "Discovery", "Skipped", "SourceProblem", "TableRef", "discover", "vended_options"]
