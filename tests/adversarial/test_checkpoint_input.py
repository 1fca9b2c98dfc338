"""Hostile input to ``memwal checkpoint`` and ``memwal scan --checkpoint``: exit 2, one line
naming what is wrong, and nothing written (the whole tree's digest is unchanged)."""

from __future__ import annotations

import pytest

from tests.adversarial.test_cli_input import assert_error, build
from tests.helpers import run_cli


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build(str(tmp_path_factory.mktemp("ckpt") / "t"))


BAD_LIFETIMES = ["0", "-1", "nan", "inf", "-inf", "1e300", "31536001", "abc", ""]


@pytest.mark.parametrize("value", BAD_LIFETIMES)
def test_bad_lifetime_on_create(shared, unchanged, value):
    with unchanged(shared):
        run = run_cli("checkpoint", "create", shared, "--lifetime", value)
    assert_error(run, 2, "--lifetime")


@pytest.mark.parametrize("value", ["0", "nan", "-5", "1e12"])
def test_bad_lifetime_on_refresh(shared, unchanged, value):
    with unchanged(shared):
        run = run_cli("checkpoint", "refresh", shared, "0" * 32, "--lifetime", value)
    assert_error(run, 2, "--lifetime")


@pytest.mark.parametrize("verb", ["refresh", "delete"])
@pytest.mark.parametrize("cid", ["0" * 32, "ffffffffffffffffffffffffffffffff"])
def test_unknown_id(shared, unchanged, verb, cid):
    extra = ["--lifetime", "60"] if verb == "refresh" else []
    with unchanged(shared):
        run = run_cli("checkpoint", verb, shared, cid, *extra)
    assert_error(run, 2, f"no checkpoint {cid}")


@pytest.mark.parametrize("cid", ["../../etc/passwd", "x" * 32, "1234", "ABC/DEF", "0" * 31 + "/"])
def test_malformed_id_never_becomes_a_path(shared, unchanged, cid):
    for argv in (["checkpoint", "delete", shared, cid], ["scan", shared, "--checkpoint", cid]):
        with unchanged(shared):
            run = run_cli(*argv)
        assert_error(run, 2, "not a checkpoint id")


def test_unknown_checkpoint_on_scan(shared, unchanged):
    with unchanged(shared):
        run = run_cli("scan", shared, "--checkpoint", "a" * 32)
    assert_error(run, 2, "no checkpoint " + "a" * 32)


@pytest.mark.parametrize("name", ["", "   ", "x" * 201, "tab\there"])
def test_bad_name(shared, unchanged, name):
    with unchanged(shared):
        run = run_cli("checkpoint", "create", shared, "--lifetime", "60", "--name", name)
    assert_error(run, 2, "checkpoint name")


def test_table_without_mem_wal(tmp_path, unchanged):
    import lance
    import pyarrow as pa

    uri = str(tmp_path / "plain")
    lance.write_dataset(pa.table({"id": [1, 2]}), uri)
    with unchanged(uri):
        run = run_cli("checkpoint", "create", uri, "--lifetime", "60")
    assert_error(run, 2, "no MemWAL index")


def test_missing_table(tmp_path, unchanged):
    with unchanged(str(tmp_path)):
        run = run_cli("checkpoint", "list", str(tmp_path / "nope"))
    assert_error(run, 2, "nope")


def test_missing_verb_and_missing_lifetime_are_usage_errors(shared, unchanged):
    with unchanged(shared):
        assert run_cli("checkpoint").rc == 2
        assert run_cli("checkpoint", "create", shared).rc == 2
        assert run_cli("checkpoint", "bogus", shared).rc == 2
