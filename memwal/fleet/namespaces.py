"""Discovery in a Lance Namespace (``namespace:dir``, ``namespace:rest``), bounded and under a root's rules.

The namespace walk (:func:`namespace_tables`) visits nested namespaces breadth first and
describes each table, with the limits a hostile or broken server cannot get past (issue 47):

* namespaces deeper than :data:`MAX_DEPTH` are not searched (reported as skipped, as the root
  walk does with folders);
* a page token seen before in the same listing ends the source (a server that hands the same
  page forever), and a source may send at most :data:`MAX_REQUESTS` requests and take
  :data:`MAX_SECONDS` in all;
* each request and answer is bounded by :mod:`memwal.fleet.rest_client` (``namespace:rest``).

A location a namespace gives is data, not trust; the rules of a root apply to it
(:func:`table_location`): it must be an absolute table URI (a relative one would be resolved
against whatever folder the fleet runs in), within the namespace's root where it has one
(``namespace:dir``), reached through no symbolic link on a local disk, and it is normalised,
so that a table listed twice, or under two spellings, is maintained once. A location that
breaks a rule is skipped with the reason.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from memwal.errors import BadInputError, MemWalError
from memwal.fleet.rest_client import NamespaceServerError, RestClient, shown_uri
from memwal.fleet.sources_model import Skipped, TableRef

NAMESPACE_PREFIX = "namespace:"
NAMESPACE_IMPLS = ("dir", "rest")
#: Deepest nesting of namespaces searched (as deep as a root's folders).
MAX_DEPTH = 16
#: Requests one namespace source may send (listings and describes), and its seconds in all.
MAX_REQUESTS = 20_000
MAX_SECONDS = 600.0


class NamespaceClient(Protocol):
    """What discovery asks a namespace: paged names, and a table's location and options."""

    requests: int
    where: str

    def list_namespaces(self, path: list[str], token: str | None) -> tuple[list[str], str | None]: ...

    def list_tables(self, path: list[str], token: str | None) -> tuple[list[str], str | None]: ...

    def describe(self, path: list[str]) -> tuple[str | None, dict[str, str]]: ...


class DirClient:
    """pylance's ``DirectoryNamespace`` (a local or object-store root) behind the same calls."""

    def __init__(self, properties: dict[str, str]) -> None:
        from lance.namespace import DirectoryNamespace

        self.ns = DirectoryNamespace(**properties)  # type: ignore[no-untyped-call]
        self.requests = 0
        self.where = f"namespace:dir {shown_uri(properties['root'])}"

    def list_namespaces(self, path: list[str], token: str | None) -> tuple[list[str], str | None]:
        from lance_namespace import ListNamespacesRequest

        self.requests += 1
        page = self.ns.list_namespaces(ListNamespacesRequest(id=path, page_token=token))
        return list(page.namespaces), getattr(page, "page_token", None) or None

    def list_tables(self, path: list[str], token: str | None) -> tuple[list[str], str | None]:
        from lance_namespace import ListTablesRequest

        self.requests += 1
        page = self.ns.list_tables(ListTablesRequest(id=path, page_token=token))
        return list(page.tables), getattr(page, "page_token", None) or None

    def describe(self, path: list[str]) -> tuple[str | None, dict[str, str]]:
        from lance_namespace import DescribeTableRequest

        self.requests += 1
        d = self.ns.describe_table(DescribeTableRequest(id=path, with_table_uri=True))
        return d.table_uri or d.location, dict(d.storage_options or {})


def client_for(source: str, properties: dict[str, str]) -> tuple[NamespaceClient, str | None]:
    """The client of ``namespace:dir|rest`` and the namespace's root (None: it has none)."""
    impl = source.removeprefix(NAMESPACE_PREFIX)
    if impl not in NAMESPACE_IMPLS:
        raise BadInputError(f"source {source}: expected namespace:{' or namespace:'.join(NAMESPACE_IMPLS)}")
    needed = "root" if impl == "dir" else "uri"
    if needed not in properties:
        raise BadInputError(f"source {source}: needs the namespace property {needed} (--namespace-property "
                            f"{needed}=...)")
    if impl == "rest":
        return RestClient(properties), None
    from memwal.store.uri import normalise_table_uri

    root = normalise_table_uri(properties["root"])
    return DirClient({**properties, "root": root}), root


def namespace_tables(source: str, properties: dict[str, str], skipped: list[Skipped]) -> Iterator[TableRef]:
    """Every table of the namespace ``source`` names (see the module docstring)."""
    client, root = client_for(source, properties)
    started = time.monotonic()

    def budget() -> None:
        if client.requests >= MAX_REQUESTS:
            raise NamespaceServerError(f"{client.where}: more than {MAX_REQUESTS:,} requests: discovery stopped")
        if time.monotonic() - started > MAX_SECONDS:
            raise NamespaceServerError(f"{client.where}: more than {MAX_SECONDS:.0f} s: discovery stopped")

    def paged(call: Any, path: list[str]) -> Iterator[str]:
        token: str | None = None
        seen: set[str] = set()
        while True:
            budget()
            names, token = call(path, token)
            yield from names
            if not token:
                return
            if token in seen:
                raise NamespaceServerError(f"{client.where}: the listing of {_shown(path)} hands out a page token "
                                           "it gave before: discovery stopped")
            seen.add(token)

    pending: list[list[str]] = [[]]
    while pending:
        path = pending.pop(0)
        for name in paged(client.list_namespaces, path):
            if len(path) + 1 > MAX_DEPTH:
                skipped.append(Skipped(f"{source} {_shown([*path, name])}",
                                       f"deeper than {MAX_DEPTH} namespaces: not searched"))
                continue
            pending.append([*path, name])
        for name in paged(client.list_tables, path):
            budget()
            try:
                location, options = client.describe([*path, name])
            except NamespaceServerError:
                raise
            except (MemWalError, OSError, ValueError, RuntimeError) as exc:
                raise NamespaceServerError(f"{client.where}: describe {_shown([*path, name])}: {exc}") from None
            uri, why = table_location(location, root)
            if uri is None:
                skipped.append(Skipped(f"{source} {_shown([*path, name])}", why))
                continue
            yield TableRef(uri, source, options, namespace_id=(*path, name))


def vended_options(source: str, properties: Mapping[str, str], table_id: Sequence[str]) -> dict[str, str]:
    """The storage options (credentials included) a namespace vends for one table now: asked
    again where the table runs, since vended credentials are short-lived and never travel
    (one bounded describe through the same client as discovery)."""
    client, _ = client_for(source, dict(properties))
    try:
        _, options = client.describe(list(table_id))
    except NamespaceServerError:
        raise
    except (MemWalError, OSError, ValueError, RuntimeError) as exc:
        raise NamespaceServerError(f"{client.where}: describe {_shown(list(table_id))}: {exc}") from None
    return {str(k): str(v) for k, v in options.items()}


def _shown(path: list[str]) -> str:
    from memwal.core.text import clip, one_line

    return one_line(clip("/".join(path) or "(root)", 200))


def table_location(location: str | None, root: str | None) -> tuple[str | None, str]:
    """``(normalised URI, "")`` of a location a namespace gave, or ``(None, why)`` when a
    root's rule refuses it (see the module docstring)."""
    from memwal.core.text import clip, one_line
    from memwal.store.uri import check_table_uri, is_object_store_uri, normalise_table_uri

    shown = one_line(clip(location or "", 200))
    if not location:
        return None, "no location given"
    try:
        check_table_uri(location)
    except BadInputError as exc:
        return None, f"location refused: {one_line(clip(str(exc), 300))}"
    if "://" not in location and not os.path.isabs(location):
        return None, f"relative location {shown!r} refused (it would name a folder of wherever the fleet runs)"
    uri = normalise_table_uri(location)
    if root is not None and not (uri + "/").startswith(root.rstrip("/") + "/"):
        return None, f"location {shown!r} is outside the namespace root"
    if not is_object_store_uri(uri):
        link = _link_on_the_way(uri, root)
        if link is not None:
            shown_link = one_line(clip(link, 200))
            return None, f"location {shown!r} passes through the symbolic link {shown_link} (never followed)"
    return uri, ""


def _link_on_the_way(path: str, root: str | None) -> str | None:
    """The first symbolic link among the folders from below ``root`` (the table folder alone
    when there is no root) down to ``path``, or None."""
    top = root.rstrip("/") if root is not None else os.path.dirname(path)
    parts = os.path.relpath(path, top).split(os.sep) if path != top else []
    here = top
    for part in parts:
        here = os.path.join(here, part)
        try:
            if stat.S_ISLNK(os.lstat(here).st_mode):
                return here
        except OSError:
            return None  # not there: the probe reports a missing table
    return None


__all__ = ["MAX_DEPTH", "MAX_REQUESTS", "MAX_SECONDS", "NAMESPACE_PREFIX", "DirClient", "NamespaceClient",
           "client_for", "namespace_tables", "table_location"]
