"""Fixtures the integration tests share (the suite-wide ones are in tests/conftest.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memwal.gc import versions as versions_module
from memwal.store.local import LocalStore
from memwal.table import retained as retained_module
from tests.clients.pylance_client import LiveWriter, live_writer
from tests.integration.test_clients_pylance import ONE


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveWriter]:
    """A pylance ``ShardWriter`` kept open over a one-shard table, its writes in a model."""
    yield from live_writer(tmp_path, ONE)


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Counter[str]]:
    """Work since the last call: version names listed, version manifests read, retained versions built,
    retained versions GC's gates read into their arrays (:class:`memwal.gc.versions.VersionProgress`)."""
    seen: Counter[str] = Counter()

    def listing(name: str) -> None:
        real = getattr(LocalStore, name)

        def wrapper(self: LocalStore, prefix: str, *args: object, **kwargs: object) -> object:
            out = real(self, prefix, *args, **kwargs)
            if prefix.startswith("_versions"):
                out = list(out)
                seen["names listed"] += len(out)
                return iter(out) if name != "list_level" else out
            return out

        monkeypatch.setattr(LocalStore, name, wrapper)

    for name in ("list", "list_keys"):
        listing(name)
    real_get_many, real_get_with_etag = LocalStore.get_many, LocalStore.get_with_etag

    def get_many(self: LocalStore, keys: list[str]) -> list[bytes | None]:
        seen["manifests read"] += sum(k.startswith("_versions/") and k.endswith(".manifest") for k in keys)
        return real_get_many(self, keys)

    def get_with_etag(self: LocalStore, key: str, **kwargs: object) -> tuple[bytes, str]:
        seen["manifests read"] += key.startswith("_versions/") and key.endswith(".manifest")
        return real_get_with_etag(self, key, **kwargs)

    monkeypatch.setattr(LocalStore, "get_many", get_many)
    monkeypatch.setattr(LocalStore, "get_with_etag", get_with_etag)
    real_build = retained_module._build

    def build(*args: object, **kwargs: object) -> object:
        out = real_build(*args, **kwargs)  # type: ignore[arg-type]
        seen["versions built"] += len(out[0])
        return out

    monkeypatch.setattr(retained_module, "_build", build)
    real_by_age = versions_module.by_age_only

    def by_age(v: retained_module.RetainedVersion) -> bool:  # read once per version a progress build reads
        seen["progress versions read"] += 1
        return real_by_age(v)

    monkeypatch.setattr(versions_module, "by_age_only", by_age)

    def take() -> Counter[str]:
        out = Counter(seen)
        seen.clear()
        return out

    return take
