"""Discovery in a Lance Namespace (``namespace:dir``, ``namespace:rest``), bounded and under a root's rules.

The namespace walk (:func:`namespace_tables`) visits nested namespaces breadth first and
describes each table, with the limits a hostile or broken server cannot get past (issues 47
and 56):

* namespaces deeper than :data:`MAX_DEPTH` are not searched (reported as skipped, as the root
  walk does with folders);
* a page token seen before in the same listing ends the source (a server that hands the same
  page forever), and a source may send at most :data:`MAX_REQUESTS` requests and take
  :data:`MAX_SECONDS` in all;
* what a source keeps is bounded too, whatever each answer holds: at most
  :data:`MAX_PENDING` namespaces waiting to be listed (each costs two requests: more could
  never be visited within the requests allowed), and at most :data:`MAX_KEPT_BYTES` of names,
  locations, storage options and skipped entries (a page of 1,000 new 1 KB names at every
  request took a plan past 2.5 GB); page tokens are kept as digests;
* each request and answer is bounded by :mod:`memwal.fleet.rest_client` (``namespace:rest``);
  a table whose description the client refuses (too many storage options, a location that
  is no string) is skipped with the reason, and the others discovered; past
  :data:`MAX_REFUSED` such tables the source is taken as broken and stopped.

A location a namespace gives is data, not trust; the rules of a root apply to it
(:func:`table_location`): it must be an absolute table URI (a relative one would be resolved
against whatever folder the fleet runs in), within the namespace's roots, reached through no
symbolic link on a local disk, and it is normalised, so that a table listed twice, or under two
spellings, is maintained once. The roots are the operator's: ``namespace:dir``'s ``root``, and
for ``namespace:rest`` the prefixes its ``root`` property names (required, comma-separated):
a REST server otherwise could point the fleet at any local path or bucket the worker's
credentials reach (issue 56, M7), and a local location is taken only under a local root the
operator gave. A location that breaks a rule is skipped with the reason.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from memwal.errors import BadInputError, MemWalError
from memwal.fleet.rest_client import NamespaceServerError, RestClient, TableAnswerError, shown_uri
from memwal.fleet.sources_model import Skipped, TableRef

NAMESPACE_PREFIX = "namespace:"
NAMESPACE_IMPLS = ("dir", "rest")
#: Deepest nesting of namespaces searched (as deep as a root's folders).
MAX_DEPTH = 16
#: Requests one namespace source may send (listings and describes), and its seconds in all.
MAX_REQUESTS = 20_000
MAX_SECONDS = 600.0
#: Namespaces waiting to be listed at once (each costs a listing of namespaces and one of tables).
MAX_PENDING = MAX_REQUESTS // 2
#: Bytes of names, locations, storage options and skipped entries one source keeps at once
#: (a real catalog: some 200 bytes of location and 2 KB of vended credentials a table, at
#: most one table a request).
MAX_KEPT_BYTES = 64 << 20
#: What each kept entry costs besides its characters (a Python string, a list slot).
_OVERHEAD = 64
#: Tables' descriptions refused (each skipped) before the source is taken as broken and stopped.
MAX_REFUSED = 100


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


def client_for(source: str, properties: dict[str, str]) -> tuple[NamespaceClient, tuple[str, ...]]:
    """The client of ``namespace:dir|rest`` and the roots every location must lie under."""
    impl = source.removeprefix(NAMESPACE_PREFIX)
    if impl not in NAMESPACE_IMPLS:
        raise BadInputError(f"source {source}: expected namespace:{' or namespace:'.join(NAMESPACE_IMPLS)}")
    needed = ("root",) if impl == "dir" else ("uri", "root")
    for name in needed:
        if name not in properties:
            why = " (the prefixes every table location must lie under, comma-separated)" if impl == "rest" \
                and name == "root" else ""
            raise BadInputError(f"source {source}: needs the namespace property {name}{why} (--namespace-property "
                                f"{name}=...)")
    roots = namespace_roots(source, properties)
    if impl == "rest":
        return RestClient({k: v for k, v in properties.items() if k != "root"}), roots
    return DirClient({**properties, "root": roots[0]}), roots


def namespace_roots(source: str, properties: Mapping[str, str]) -> tuple[str, ...]:
    """The roots of a namespace source: ``namespace:dir``'s ``root``; the comma-separated
    prefixes of ``namespace:rest``'s ``root``, each an absolute table URI, normalised."""
    from memwal.store.uri import check_table_uri, normalise_table_uri

    given = str(properties.get("root") or "")
    parts = [given] if source == f"{NAMESPACE_PREFIX}dir" else [p for p in given.split(",") if p.strip()]
    roots = []
    for part in parts:
        if "://" not in part and not os.path.isabs(part.strip()) and source != f"{NAMESPACE_PREFIX}dir":
            raise BadInputError(f"source {source}: root {part.strip()!r}: expected an absolute path or a URI")
        roots.append(normalise_table_uri(check_table_uri(part.strip())))
    if not roots:
        raise BadInputError(f"source {source}: the namespace property root names no prefix")
    return tuple(roots)


class _Budget:
    """What one namespace source may spend and keep (see the module docstring)."""

    def __init__(self, client: NamespaceClient) -> None:
        self.client = client
        self.started = time.monotonic()
        self.kept = 0

    def request(self) -> None:
        if self.client.requests >= MAX_REQUESTS:
            raise NamespaceServerError(f"{self.client.where}: more than {MAX_REQUESTS:,} requests: discovery stopped")
        if time.monotonic() - self.started > MAX_SECONDS:
            raise NamespaceServerError(f"{self.client.where}: more than {MAX_SECONDS:.0f} s: discovery stopped")

    def keep(self, *texts: str) -> None:
        self.kept += sum(len(t) + _OVERHEAD for t in texts)
        if self.kept > MAX_KEPT_BYTES:
            raise NamespaceServerError(f"{self.client.where}: more than {MAX_KEPT_BYTES >> 20} MiB of names, locations "
                                       "and options kept: discovery stopped")

    def release(self, *texts: str) -> None:
        self.kept -= sum(len(t) + _OVERHEAD for t in texts)


def namespace_tables(source: str, properties: dict[str, str], skipped: list[Skipped]) -> Iterator[TableRef]:
    """Every table of the namespace ``source`` names (see the module docstring)."""
    client, roots = client_for(source, properties)
    budget = _Budget(client)

    def skip(path: list[str], why: str) -> None:
        entry = Skipped(f"{source} {_shown(path)}", why)
        budget.keep(entry.path, entry.reason)
        skipped.append(entry)

    def paged(call: Any, path: list[str]) -> Iterator[str]:
        token: str | None = None
        seen: set[bytes] = set()
        while True:
            budget.request()
            names, token = call(path, token)
            yield from names
            if not token:
                return
            digest = hashlib.sha256(token.encode()).digest()
            if digest in seen:
                raise NamespaceServerError(f"{client.where}: the listing of {_shown(path)} hands out a page token "
                                           "it gave before: discovery stopped")
            seen.add(digest)

    pending: deque[list[str]] = deque([[]])
    refused = 0
    while pending:
        path = pending.popleft()
        budget.release(*path[-1:])
        for name in paged(client.list_namespaces, path):
            if len(path) + 1 > MAX_DEPTH:
                skip([*path, name], f"deeper than {MAX_DEPTH} namespaces: not searched")
                continue
            if len(pending) >= MAX_PENDING:
                raise NamespaceServerError(f"{client.where}: more than {MAX_PENDING:,} namespaces to list, more than "
                                           f"{MAX_REQUESTS:,} requests could visit: discovery stopped")
            budget.keep(name)
            pending.append([*path, name])
        for name in paged(client.list_tables, path):
            budget.request()
            try:
                location, options = client.describe([*path, name])
            except TableAnswerError as exc:
                refused += 1
                if refused > MAX_REFUSED:
                    raise NamespaceServerError(f"{client.where}: more than {MAX_REFUSED} tables' descriptions refused "
                                               f"(the last: {exc}): discovery stopped") from None
                skip([*path, name], str(exc))
                continue
            except NamespaceServerError:
                raise
            except (MemWalError, OSError, ValueError, RuntimeError) as exc:
                raise NamespaceServerError(f"{client.where}: describe {_shown([*path, name])}: {exc}") from None
            uri, why = table_location(location, roots)
            if uri is None:
                skip([*path, name], why)
                continue
            budget.keep(uri, *path, name, *(f"{k}{v}" for k, v in options.items()))
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


def table_location(location: str | None, roots: Sequence[str]) -> tuple[str | None, str]:
    """``(normalised URI, "")`` of a location a namespace gave, or ``(None, why)`` when a
    root's rule refuses it (see the module docstring); ``roots``: the prefixes allowed."""
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
    root = next((r for r in roots if under(uri, r)), None)
    if root is None:
        where = "a local path" if not is_object_store_uri(uri) else "a location"
        return None, f"{where} {shown!r} outside the namespace's roots (the property root) refused"
    if not is_object_store_uri(uri):
        link = _link_on_the_way(uri, root)
        if link is not None:
            shown_link = one_line(clip(link, 200))
            return None, f"location {shown!r} passes through the symbolic link {shown_link} (never followed)"
    return uri, ""


def under(uri: str, root: str) -> bool:
    """Whether the normalised ``uri`` is ``root`` or lies below it (by whole path parts)."""
    return uri == root or (uri + "/").startswith(root.rstrip("/") + "/")


def _link_on_the_way(path: str, root: str) -> str | None:
    """The first symbolic link among the folders from below ``root`` down to ``path``, or None."""
    top = root.rstrip("/") or "/"
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


__all__ = ["MAX_DEPTH", "MAX_KEPT_BYTES", "MAX_PENDING", "MAX_REFUSED", "MAX_REQUESTS", "MAX_SECONDS",
           "NAMESPACE_PREFIX", "DirClient", "NamespaceClient", "client_for", "namespace_roots", "namespace_tables",
           "table_location", "under"]
