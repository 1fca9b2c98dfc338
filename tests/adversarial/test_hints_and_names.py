"""Issue 83, wrong reads 1 and 2: a version hint lagging over a gap, and mixed manifest names.

1. A shard's version hint names version 5 of 151 and versions 6..8 are gone (GC prunes old
   versions and may leave gaps below the newest 128, memwal.gc.manifests): the probe from the hint
   stopped at 5, so ``scan`` read 54 rows of 200, ``verify`` said OK and every merge failed its
   check against version 5. Readers now look one version past the end of the chain and list the
   shard's versions when the chain ended at a gap; a current hint costs the requests it did.
2. A base table named by V1 (``<version>.manifest``) beside a stray V2-named copy of an old
   manifest: pylance refuses it ("multiple manifest naming schemes"), ``status`` and ``scan`` read
   the stray as the latest version. memwal now refuses it too: exit code 1, one line naming the
   folder and a name of each scheme.

Every table is written by pylance's ``ShardWriter``; reads are checked against the row model.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import pytest

import memwal
from bench.harness.requests import table_files, upload
from memwal.demo import Model, Workload, create_base_table, shard_ids_for, write_generations
from memwal.errors import ReadError
from memwal.pb import shard_manifest_pb2
from memwal.store import Store, open_store
from memwal.table import open_table
from memwal.table.manifest import latest_version_key
from memwal.table.naming import U64_MAX, manifest_key, version_hint_key
from memwal.table.shards import (
    GAP_LOOK,
    WHOLE_NEWEST,
    latest_shard_manifest,
    list_manifest_versions,
    probe_shard_manifest,
    read_hinted_manifests,
    reader_shard_manifest,
)
from tests.conftest import table_rows
from tests.helpers import assert_one_line_error, run_cli

# -- 1. a lagging version hint over a gap -------------------------------------------------------

#: One shard, 150 generations: manifest versions 1 (the writer's claim) to 151 (issue 83's shape).
GAPPED = Workload(base_rows=50, shards=1, generations=150, rows_per_generation=4, indexes=False, seed=5)
SHARD = shard_ids_for(GAPPED)[0]


@pytest.fixture(scope="module")
def gapped_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Model]:
    uri = str(tmp_path_factory.mktemp("gapped") / "t")
    _, model = create_base_table(uri, GAPPED)
    write_generations(uri, GAPPED, model)
    assert list_manifest_versions(open_table(uri).store, SHARD) == list(range(1, 152))
    return uri, model


@pytest.fixture
def gapped(gapped_template: tuple[str, Model], tmp_path: Path) -> tuple[str, Model]:
    """A private copy of the 151-version table and the rows it holds."""
    uri, model = gapped_template
    dst = str(tmp_path / "t")
    shutil.copytree(uri, dst, symlinks=True)
    return dst, model


def remove_versions(uri: str, versions: range) -> None:
    for v in versions:
        Path(uri, manifest_key(SHARD, v)).unlink()


def set_hint(uri: str, version: int) -> None:
    Path(uri, version_hint_key(SHARD)).write_text(json.dumps({"version": version}))


def renumber_up_to(uri: str, last: int) -> None:
    """Versions after the latest up to ``last``, each the latest's state under its own number, as
    a writer's versions that list nothing new leave them (claims, empty flushes)."""
    top = max(list_manifest_versions(open_table(uri).store, SHARD))
    state = shard_manifest_pb2.ShardManifest.FromString(Path(uri, manifest_key(SHARD, top)).read_bytes())
    for v in range(top + 1, last + 1):
        state.version = v
        Path(uri, manifest_key(SHARD, v)).write_bytes(state.SerializeToString())


def scan_json(uri: str) -> dict[str, Any]:
    run = run_cli("scan", uri, "--json", "--columns", "id")
    assert run.rc == 0, run.stderr
    doc: dict[str, Any] = json.loads(run.stdout)
    return doc


def test_a_hint_lagging_over_a_gap_reads_the_newest_version(gapped: tuple[str, Model]) -> None:
    """Issue 83's state: the hint at 5, versions 6..8 gone. Every reader of the latest manifest
    (a reader, the lag, GC's probe from a planned version, the merge's check before its commit,
    verify's LSM view) finds version 151, and the merge merges all 150 generations."""
    uri, model = gapped
    remove_versions(uri, range(6, 9))
    set_hint(uri, 5)
    store = open_table(uri).store
    state = reader_shard_manifest(store, SHARD)
    assert state is not None and state.version == 151 == latest_shard_manifest(store, SHARD).version  # type: ignore[union-attr]
    assert len(state.flushed) == 150
    assert read_hinted_manifests(store).states[SHARD].version == 151
    assert probe_shard_manifest(store, SHARD, 5).version == 151  # type: ignore[union-attr]

    assert memwal.open(uri).scan().sort_by("id").to_pylist() == model.sorted_rows()
    doc = scan_json(uri)
    assert [s["manifest_version"] for s in doc["shards"]] == [151]
    assert sorted(r["id"] for r in doc["rows"]) == sorted(model.rows) and doc["num_rows"] == len(model.rows)

    verify = run_cli("verify", uri, "--json")
    assert verify.rc == 0, verify.stderr
    assert json.loads(verify.stdout)["lsm_rows"] == len(model.rows)

    merge = run_cli("merge", uri)
    assert merge.rc == 0, merge.stderr
    assert "generations 1..150" in merge.stdout
    assert table_rows(open_table(uri)) == model.sorted_rows()
    assert memwal.open(uri).scan().sort_by("id").to_pylist() == model.sorted_rows()


@pytest.mark.parametrize("above", [WHOLE_NEWEST + 1, 2 * WHOLE_NEWEST])
def test_the_look_past_the_chain_finds_a_newest_version_up_to_256_above_it(gapped: tuple[str, Model],
                                                                             above: int) -> None:
    """The chain from the hint ends at 22 (23 gone with everything up to the newest 128, as a prune
    cut short leaves them); the newest is 129 (the nearest a pruned gap allows) or 256 versions
    above it (the farthest the one look past the chain proves): the reader finds it either way."""
    uri, model = gapped
    hint = 22  # version 22 lists 21 generations: reading it would miss most rows
    newest = hint + above
    renumber_up_to(uri, newest)
    remove_versions(uri, range(hint + 1, newest - WHOLE_NEWEST + 1))
    set_hint(uri, hint)
    store = open_table(uri).store
    assert reader_shard_manifest(store, SHARD).version == newest  # type: ignore[union-attr]
    assert memwal.open(uri).scan().sort_by("id").to_pylist() == model.sorted_rows()


@pytest.mark.parametrize("lag", [0, 2])
def test_a_current_or_slightly_lagging_hint_costs_the_requests_it_did(gapped: tuple[str, Model],
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       lag: int) -> None:
    """No listing, and as many requests as before the look past the chain: that HEAD replaced the
    second HEAD of the version the chain ended at (a current hint: the hint, 3 HEADs, the
    manifest; each version the hint lags, one HEAD more)."""
    uri, model = gapped
    set_hint(uri, 151 - lag)
    store = open_table(uri).store
    calls = count_calls(store, monkeypatch)
    state = reader_shard_manifest(store, SHARD)
    assert state is not None and state.version == 151
    heads = [151 - lag + i for i in range(lag + 2)] + [151 + GAP_LOOK]
    assert calls == [("get", version_hint_key(SHARD))] + [("head", manifest_key(SHARD, v)) for v in heads] + [
        ("get", manifest_key(SHARD, 151))]
    assert len(calls) == 5 + lag  # before: the hint, a HEAD of each version and of the next, the read's HEAD and GET


def count_calls(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every request ``store`` serves from now on, in order (a listing of any kind counts too)."""
    calls: list[tuple[str, str]] = []

    def counted(name: str) -> Callable[..., Any]:
        real = getattr(store, name)

        def call(key: str, *args: Any, **kwargs: Any) -> Any:
            calls.append((name, key))
            return real(key, *args, **kwargs)
        return call

    for name in ("get", "head", "list", "list_keys", "list_level", "list_dirs",
                 "list_dirs_and_links", "least_key"):
        monkeypatch.setattr(store, name, counted(name))
    return calls


# -- 2. mixed manifest names ----------------------------------------------------------------------

def v1_names(uri: str) -> list[str]:
    return sorted(n for n in os.listdir(Path(uri, "_versions")) if n.endswith(".manifest"))


def v2_name(version: int) -> str:
    return f"{U64_MAX - version:020d}.manifest"


def with_stray(template: tuple[str, Model], dst: Path, first: str) -> str:
    """A copy of the V1 table with a V2-named copy of version 2's manifest (before the merge): the
    first name a listing shows is ``first`` ("v1": version 1's is kept; "v2": old versions were
    cleaned up, and the stray sorts before the names left)."""
    uri = str(dst)
    shutil.copytree(template[0], uri, symlinks=True)
    stray = Path(uri, "_versions", "2.manifest").read_bytes()
    if first == "v2":
        lance.dataset(uri).cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)
    Path(uri, "_versions", v2_name(2)).write_bytes(stray)
    names = v1_names(uri)
    assert (names[0] == v2_name(2)) == (first == "v2"), names
    return uri


@pytest.fixture(params=["v1", "v2"])
def mixed(request: pytest.FixtureRequest, v1_template: tuple[str, Model], tmp_path: Path) -> Iterator[str]:
    yield with_stray(v1_template, tmp_path / "t", request.param)


def test_a_v1_table_reads_and_its_latest_is_found(v1_template: tuple[str, Model]) -> None:
    """The control: the V1 table alone is read whole, at its latest version."""
    uri, model = v1_template
    assert all(not n.startswith("1844") for n in v1_names(uri))
    latest = max(int(n.removesuffix(".manifest")) for n in v1_names(uri))
    assert run_cli("status", uri).rc == 0
    assert open_table(uri).manifest().version == latest == lance.dataset(uri).version
    assert memwal.open(uri).scan().sort_by("id").to_pylist() == model.sorted_rows()


def test_a_stray_v2_manifest_beside_v1_names_is_refused(mixed: str) -> None:
    """pylance refuses the table; so do ``status``, ``scan`` and the API, naming the folder and a
    name of each scheme, whichever name a listing shows first."""
    with pytest.raises((OSError, ValueError, RuntimeError), match="multiple manifest naming schemes"):
        lance.dataset(mixed)
    for command in ("status", "scan", "merge", "gc"):
        run = run_cli(command, mixed)
        assert_one_line_error(run, 1, f"{mixed}/_versions", v2_name(2), ".manifest (V1", "two schemes")
    with pytest.raises(ReadError, match="two schemes"):
        memwal.open(mixed)


@pytest.mark.parametrize("first", ["v1", "v2"])
def test_an_object_store_refuses_it_from_the_names_it_lists_anyway(v1_template: tuple[str, Model],
                                                                   tmp_path: Path, s3_server: Any,
                                                                   first: str) -> None:
    """On S3 the latest of a V2-first listing comes from the first page, and the names after the
    first in that page are checked too (pylance 14 takes the stray there as the latest: observed);
    a V1-first table is listed whole and checked there. A table of V2 names still finds its latest
    with one listing request."""
    local = with_stray(v1_template, tmp_path / "t", first)
    uri, opts = s3_server.new_table(f"mixed-{first}")
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    upload("s3", s3_server, bucket, prefix, table_files(Path(local)))
    run = run_cli("status", uri, *[a for k, v in opts.items() for a in ("--storage-option", f"{k}={v}")])
    assert_one_line_error(run, 1, "_versions", v2_name(2), "two schemes")

    v2_uri, v2_opts = s3_server.new_table(f"v2-{first}")
    ds = lance.write_dataset(lance.dataset(str(Path(v1_template[0]))).to_table(), v2_uri, storage_options=v2_opts)
    for i in range(3):
        ds.update_config({"n": str(i)})
    store = open_store(v2_uri, v2_opts)
    since = len(s3_server.requests)
    assert latest_version_key(store) == (4, f"_versions/{v2_name(4)}")
    assert len(s3_server.requests) - since == 1
