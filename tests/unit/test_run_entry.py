"""A run record listed by ``memwal history`` carries every field the record stores."""

from __future__ import annotations

import json

from memwal.history.record import OK, RunRecord


def test_the_listed_entry_is_the_stored_record():
    record = RunRecord("merge", "r1", "local", "me@host:1", OK, started_at=10.0, finished_at=12.5, versions=[4, 5],
                       figures={"generations": 2}, lag={"s": [1, 10, 3.0]})
    entry = record.entry()
    assert dict(entry) == record.to_dict()
    assert RunRecord.loads(record.dumps()).entry() == entry
    assert json.loads(record.summary().dumps())["detail"] is True
