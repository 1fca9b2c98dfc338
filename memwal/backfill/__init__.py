"""Backfills: the maintenance jobs over many tables, resumable.

``run_backfill(tables, jobs, ...)`` runs, for each table, the chosen jobs in the canonical
order (merge, catchup, compact, snapshot, gc) through ``memwal.actions``, as the CLI and
the Airflow operators do; whether a job failed is the action's own verdict. Tables run
concurrently (``concurrency`` threads);
a table's jobs run one after the other, and the first failure stops that table (its later
jobs are reported as not run) without stopping the others.

Resumability: every finished (table, job) pair is recorded in a JSON state file as soon
as it finishes; a rerun skips recorded pairs unless ``restart``. A failed job is never
recorded, so a rerun retries it (and the jobs after it).

No Airflow, no Spark import here: the CLI (``memwal backfill``) adds progress and output.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from memwal.actions import ACTIONS as JOB_ORDER
from memwal.actions import action
from memwal.errors import BadInputError, MemWalError

DEFAULT_STATE_FILE = os.path.join(".memwal-backfill", "state.json")
STATE_FORMAT = 1

# statuses of one (table, job); WAITING: it ran and did what it could, but time alone will
# let a rerun do more (a gc held by the reader grace period), so it is not recorded as done
DONE, WAITING, SKIPPED, FAILED, NOT_RUN = "done", "waiting", "skipped", "failed", "not-run"


def parse_jobs(text: str | Sequence[str] | None) -> list[str]:
    """``"merge,gc"`` -> ``["merge", "gc"]`` in canonical order; unknown names are bad input."""
    if text is None:
        return list(JOB_ORDER)
    items = text.split(",") if isinstance(text, str) else list(text)
    names = {s.strip() for s in items if s.strip()}
    unknown = sorted(names - set(JOB_ORDER))
    if unknown:
        raise BadInputError(f"unknown job {', '.join(unknown)}: expected some of {','.join(JOB_ORDER)}")
    if not names:
        raise BadInputError("no job given")
    return [j for j in JOB_ORDER if j in names]


# A tables file lists table URIs; 16 MiB is some 200,000 of them. A bigger "list" is a mistake
# (a data file, /dev/zero) and must not be read into memory whole.
MAX_TABLES_FILE_BYTES = 16 << 20
MAX_URI_CHARS = 4096


def read_tables_file(path: str) -> list[str]:
    """One table URI per line; blank lines and ``#`` comments are ignored; ``-`` is stdin.

    The whole file is read and checked before any job runs, so a bad list is bad input
    with nothing written: a missing file, a directory or device, a binary or non-UTF-8
    file, an empty list and a line that is not a table URI are each one error naming the
    file (and the line).
    """
    where = f"--tables-file {path}"
    text = _decode_tables_file(_read_tables_bytes(path, where), where)
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        uri = line.split("#", 1)[0].strip()
        if not uri:
            continue
        problem = table_uri_problem(uri)
        if problem:
            raise BadInputError(f"{where} line {number}: {problem}")
        out.append(uri)
    if not out:
        raise BadInputError(f"{where}: no table URI in it (only blank lines and # comments)")
    return out


def _read_tables_bytes(path: str, where: str) -> bytes:
    """The file's bytes, refusing what is not a regular file before opening it (a FIFO would block)."""
    import stat
    import sys

    if path == "-":
        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read(MAX_TABLES_FILE_BYTES + 1) if stream else sys.stdin.read().encode()
    else:
        try:
            st = os.stat(path)
            if stat.S_ISDIR(st.st_mode):
                raise BadInputError(f"{where}: is a directory, not a file of table URIs")
            if not stat.S_ISREG(st.st_mode):
                raise BadInputError(f"{where}: not a regular file")
            with open(path, "rb") as f:
                data = f.read(MAX_TABLES_FILE_BYTES + 1)
        except OSError as exc:
            raise BadInputError(f"{where}: {exc.strerror or 'cannot read'}") from None
    if len(data) > MAX_TABLES_FILE_BYTES:
        raise BadInputError(f"{where}: larger than {MAX_TABLES_FILE_BYTES >> 20} MiB, not a list of table URIs")
    if not data.strip():
        raise BadInputError(f"{where}: the file is empty (or only whitespace)")
    return data


def _decode_tables_file(data: bytes, where: str) -> str:
    """UTF-8 text (a BOM is fine, Windows line ends too); binary content names its first bad line."""
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise BadInputError(f"{where} line {line}: binary content (NUL byte), not a text file of table URIs")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BadInputError(f"{where} line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None
    return text.replace("\r\n", "\n")


def table_uri_problem(uri: str) -> str | None:
    """Why ``uri`` cannot name a table (checked without any I/O), or None.

    The rule every command applies (``memwal.store.check_table_uri``), after what a
    line of a file can add: control characters, absurd lengths, and credentials in a
    ``scheme://user:secret@host`` part, which are refused without being echoed.
    """
    if len(uri) > MAX_URI_CHARS:
        return f"table URI longer than {MAX_URI_CHARS} characters"
    if any(ord(c) < 32 or ord(c) == 127 for c in uri):
        return f"control character in table URI {_shown_uri(uri)}"
    head, sep, rest = uri.partition("://")
    userinfo = rest.split("/", 1)[0].rpartition("@")[0]
    if sep and userinfo and (":" in userinfo or head.lower() != "abfss"):  # abfss://container@account is no secret
        return f"invalid table URI {_shown_uri(uri)}: credentials in a URI (pass them with --storage-options-file)"
    from memwal.store import check_table_uri

    try:
        check_table_uri(uri)
    except BadInputError as exc:
        return str(exc)
    return None


def _shown_uri(uri: str) -> str:
    """A URI as quoted in an error: at most 120 characters, credentials in ``user:pass@`` hidden."""
    head, sep, rest = uri.partition("://")
    if sep and "@" in rest.split("/", 1)[0] and (":" in rest.split("@", 1)[0] or head.lower() != "abfss"):
        uri = f"{head}://***@{rest.split('@', 1)[1]}"
    return repr(uri if len(uri) <= 120 else uri[:117] + "...")


def table_key(uri: str) -> str:
    """The identity of a table in the state file: URIs as given, local paths made absolute."""
    uri = uri.strip()
    if "://" in uri:
        return uri.rstrip("/")
    return os.path.abspath(uri)


def unique_tables(tables: Sequence[str]) -> list[str]:
    seen, out = set(), []
    for t in tables:
        key = table_key(t)
        if key not in seen:
            seen.add(key)
            out.append(t.strip())
    return out


def options_fingerprint(engine: str, options: dict[str, Any]) -> str:
    """What a finished (table, job) was run with: a rerun with other options (``--grace-seconds
    0`` after a run with the default) is new work, not something finished earlier."""
    import hashlib

    doc = json.dumps({"engine": engine, **{k: v for k, v in options.items() if k != "lease_ttl"}},
                     sort_keys=True, default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


class BackfillState:
    """Finished (table, job) pairs, persisted atomically after every change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.finished: dict[str, dict[str, dict[str, Any]]] = {}
        if os.path.exists(path):
            try:
                with open(path) as f:
                    doc = json.load(f)
                if doc.get("format") != STATE_FORMAT or not isinstance(doc.get("finished"), dict):
                    raise ValueError("not a memwal backfill state file")
                self.finished = doc["finished"]
            except (OSError, ValueError, AttributeError) as exc:
                raise BadInputError(f"state file {path}: unreadable ({exc}); fix it or pass --restart") from exc

    def is_done(self, table: str, job: str) -> dict[str, Any] | None:
        with self._lock:
            return self.finished.get(table_key(table), {}).get(job)

    def mark_done(self, table: str, job: str, record: dict[str, Any]) -> None:
        with self._lock:
            self.finished.setdefault(table_key(table), {})[job] = record
            self._save()

    def forget(self, tables: Sequence[str]) -> None:
        with self._lock:
            for t in tables:
                self.finished.pop(table_key(t), None)
            self._save()

    def _save(self) -> None:
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".state-", dir=directory)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"format": STATE_FORMAT, "finished": self.finished}, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


@dataclass
class JobRun:
    table: str
    job: str
    status: str
    seconds: float = 0.0
    summary: str = ""
    error: str | None = None
    exit_code: int | None = None
    result: dict[str, Any] | None = None


@dataclass
class TableRun:
    table: str
    jobs: list[JobRun] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(j.status == FAILED for j in self.jobs)

    @property
    def error(self) -> str | None:
        return next((f"{j.job}: {j.error}" for j in self.jobs if j.status == FAILED), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "status": "failed" if self.failed else "ok",
            "error": self.error,
            "jobs": [asdict(j) for j in self.jobs],
        }


@dataclass
class BackfillReport:
    jobs: list[str]
    tables: list[TableRun]
    state_file: str
    seconds: float = 0.0

    @property
    def failed_tables(self) -> list[TableRun]:
        return [t for t in self.tables if t.failed]

    def counts(self) -> dict[str, int]:
        out = {DONE: 0, WAITING: 0, SKIPPED: 0, FAILED: 0, NOT_RUN: 0}
        for t in self.tables:
            for j in t.jobs:
                out[j.status] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "state_file": self.state_file,
            "seconds": round(self.seconds, 3),
            "summary": {"tables": len(self.tables), "tables_failed": len(self.failed_tables), **self.counts()},
            "failed_tables": [t.table for t in self.failed_tables],
            "tables": [t.to_json() for t in self.tables],
        }


def summarize(job: str, doc: dict[str, Any]) -> str:
    """One short phrase for a job's result document (the summary table's cell)."""
    if job == "merge":
        if doc.get("version") is None:
            return "nothing to merge"
        gens = sum(s["to_generation"] - s["from_generation"] + 1 for s in doc.get("shards", []))
        return f"v{doc['version']}: {gens} generations"
    if job == "catchup":
        if not doc.get("indexes"):
            return "no index to catch up"
        state = "recorded" if doc.get("all_recorded") else "not all recorded"
        return f"v{doc['version']}: {len(doc['indexes'])} indexes {state}" if doc.get("version") else state
    if job == "compact":
        if doc.get("version") is None:
            return "nothing to compact"
        return f"v{doc['version']}: {doc.get('fragments_before')} -> {doc.get('fragments_after')} fragments"
    if job == "snapshot":
        return f"v{doc['version']}" if doc.get("version") is not None else "unchanged"
    if job == "gc":
        return f"{len(doc.get('deleted', []))} deleted, {len(doc.get('blocked', []))} blocked"
    return "done"


Runner = Callable[..., dict[str, Any]]
Progress = Callable[[str, JobRun], None]


def run_job(
    runner: Runner, table: str, job: str, storage_options: dict[str, str], engine: str, options: dict[str, Any]
) -> JobRun:
    """Run one job on one table; the outcome, never an exception (one table's failure must
    not stop the others). Failure is the action's own verdict (its ``problems``)."""
    started = time.monotonic()
    run = JobRun(table=table, job=job, status=DONE)
    try:
        doc = runner(job, table, storage_options, engine=engine, dry_run=False, **options)
        run.result = json.loads(json.dumps(doc, default=str))
        problems = action(job).problems(doc)  # the same verdict as the CLI's exit code
        if problems:
            run.status, run.error, run.exit_code = FAILED, "; ".join(problems), 1
        else:
            run.summary = summarize(job, doc)
            if doc.get("time_will_free"):
                run.status = WAITING
                run.summary += "; more becomes free after the reader grace period: rerun later"
    except MemWalError as exc:
        run.status, run.error, run.exit_code = FAILED, str(exc).strip() or type(exc).__name__, exc.exit_code
    except Exception as exc:  # noqa: BLE001 - one table's failure must not stop the others
        text = (str(exc).strip().splitlines() or [""])[0]
        run.status, run.error, run.exit_code = FAILED, f"{type(exc).__name__}: {text}".rstrip(": "), 1
    run.seconds = time.monotonic() - started
    return run


def run_backfill(
    tables: Sequence[str],
    jobs: Sequence[str],
    *,
    storage_options: dict[str, str] | None = None,
    engine: str = "local",
    concurrency: int = 1,
    state: BackfillState | None = None,
    restart: bool = False,
    job_options: dict[str, dict[str, Any]] | None = None,
    progress: Progress | None = None,
    runner: Runner | None = None,
) -> BackfillReport:
    """Run ``jobs`` over ``tables``; see the module docstring. ``progress(event, job_run)``
    is called with ``"start"`` and ``"end"`` from worker threads."""
    if runner is None:
        from memwal.actions import run_action as runner
    if concurrency < 1:
        raise BadInputError("--concurrency must be at least 1")
    tables = unique_tables(tables)
    if not tables:
        raise BadInputError("no table given")
    jobs = parse_jobs(list(jobs))
    state = state or BackfillState(DEFAULT_STATE_FILE)
    if restart:
        state.forget(tables)
    options = job_options or {}
    notify = progress or (lambda event, run: None)
    started = time.monotonic()

    def one_table(table: str) -> TableRun:
        out = TableRun(table=table)
        stopped_by: str | None = None
        for job in jobs:
            if stopped_by:
                run = JobRun(table, job, NOT_RUN, error=f"not run: {stopped_by} failed")
                out.jobs.append(run)
                notify("end", run)
                continue
            record = state.is_done(table, job)
            fingerprint = options_fingerprint(engine, options.get(job, {}))
            if record is not None and record.get("options", fingerprint) == fingerprint:
                earlier = record.get("summary") or ""
                summary = f"finished earlier ({earlier})" if earlier else "finished earlier"
                run = JobRun(table, job, SKIPPED, summary=summary)
                out.jobs.append(run)
                notify("end", run)
                continue
            notify("start", JobRun(table, job, "running"))
            run = run_job(runner, table, job, dict(storage_options or {}), engine, options.get(job, {}))
            if run.status == DONE:  # WAITING is not recorded: a rerun does the rest
                state.mark_done(
                    table,
                    job,
                    {"finished_at": time.time(), "summary": run.summary, "version": (run.result or {}).get("version"),
                     "options": fingerprint},
                )
            elif run.status == FAILED:
                stopped_by = job
            out.jobs.append(run)
            notify("end", run)
        return out

    if concurrency == 1 or len(tables) == 1:
        results = [one_table(t) for t in tables]
    else:
        with ThreadPoolExecutor(max_workers=min(concurrency, len(tables)), thread_name_prefix="backfill") as pool:
            results = list(pool.map(one_table, tables))
    return BackfillReport(jobs=jobs, tables=results, state_file=state.path, seconds=time.monotonic() - started)
