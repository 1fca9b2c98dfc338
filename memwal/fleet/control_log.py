"""The operator's pauses in the fleet's state, and their log: written, signed, recognised.

``memwal fleet pause|resume|cancel`` (and the Airflow control DAG) write ``controls.json``
(:mod:`memwal.fleet.state`): the pauses in force, and a log of every pause, resume and cancel
with who, why and when (the last :data:`MAX_LOG` entries, and the entry of every pause in
force). ``controls.json`` is storage, and whoever can write it can write a pause (issue 56, L1:
a forged ``*`` pause stopped the whole fleet and looked like a real one). So a pause read from
the state is honoured only when it is recognised as one memwal wrote (:func:`stored_pauses`):

- **with the fleet's key** (``MEMWAL_FLEET_KEY``; the CLI and every Airflow component that
  plans, pauses or shows the page need it): every pause and every log entry carries an
  HMAC-SHA256 over what it says *and where*: its kind (a pause, or a log entry: one is never
  taken for the other, so a signed resume or cancel pasted into the pauses is refused), its
  action, target, who, why, when, a random nonce and the state's location (a pause copied
  from another fleet's state is refused). The state also holds the signed set of the nonces in
  force (``in_force``), rewritten by every pause and resume: a pause that was resumed is no
  longer in it, so replaying it is refused (issue 61); nor is a pause older than a signed resume
  of its target the log holds (an old pause restored with its old set in force, issue 83). What a
  signature cannot see is a rollback of the whole document to an earlier copy: keep the state
  where only the fleet writes;
- **without a key** (the default): a pause is recognised when the same write logged it (its
  log entry: the same target, who, when and nonce). Anyone who can write the state can then
  write both: such pauses are *unauthenticated*, and ``fleet status`` and the page say so
  (:func:`authenticated`); a fleet-wide pause needs the operator's explicit confirmation
  (:mod:`memwal.fleet.targets`).

Any other pause is shown as forged, with why, and withholds nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memwal.core.json_doc import finite, list_of, mapping_of
from memwal.errors import BadInputError
from memwal.fleet.controls import MAX_GLOB_PAUSES, MAX_TARGET, MAX_TEXT, Pause, is_glob, shown

if TYPE_CHECKING:
    from memwal.fleet.state import FleetState

#: Entries of the controls' log kept (the oldest go first).
MAX_LOG = 500
#: The environment variable holding the fleet's key: pauses written with it are signed, and
#: with it set only signed pauses are honoured. Never shown, never on a command line.
KEY_ENV = "MEMWAL_FLEET_KEY"
#: What a signature says it covers: a pause in force, a log entry, the set of nonces in force.
PAUSE, LOG, IN_FORCE = "memwal-fleet-pause/1", "memwal-fleet-log/1", "memwal-fleet-in-force/1"

log = logging.getLogger(__name__)


def authenticated() -> bool:
    """Whether this process has the fleet's key: pauses it writes are signed and only signed
    ones are honoured. Without it, whoever can write the state can pause tables."""
    return _key() is not None


def location_of(uri: str) -> str:
    """The state's location as a signature binds it: one spelling on every machine (a local
    folder made absolute)."""
    uri = uri.strip().rstrip("/")
    return uri if "://" in uri else os.path.abspath(uri)


def canonical_target(target: str) -> str:
    """A pause's or cancel's target as recorded: a table URI or path normalised as discovery
    names tables (``.demo/fleet/big`` is recorded as the absolute path), a glob over a relative
    path made absolute; a glob that starts with a wildcard, and any other name (a namespace
    source), as written."""
    from memwal.store.uri import check_table_uri, normalise_table_uri

    target = target.strip()
    if is_glob(target):
        relative = "://" not in target and not target.startswith("/") and target[0] not in "*?["
        return os.path.abspath(target) if relative else target
    try:
        return normalise_table_uri(check_table_uri(target))
    except BadInputError:
        return target


def _key() -> bytes | None:
    value = os.environ.get(KEY_ENV, "")
    return value.encode() if value else None


def _signature(key: bytes, kind: str, location: str, entry: Mapping[str, Any]) -> str:
    """HMAC-SHA256 of what an entry says (a pause's action is "pause", whatever it holds)."""
    action = "pause" if kind == PAUSE else entry.get("action")
    said = [kind, location, action, entry.get("target"), entry.get("by"), entry.get("reason"), entry.get("at"),
            entry.get("nonce")]
    return hmac.new(key, json.dumps(said, separators=(",", ":")).encode(), hashlib.sha256).hexdigest()


def _in_force_signature(key: bytes, location: str, nonces: Sequence[Any]) -> str:
    said = [IN_FORCE, location, sorted(str(n) for n in nonces)]
    return hmac.new(key, json.dumps(said, separators=(",", ":")).encode(), hashlib.sha256).hexdigest()


def _verified(key: bytes, kind: str, location: str, entry: Mapping[str, Any]) -> bool:
    sig = entry.get("sig")
    return isinstance(sig, str) and hmac.compare_digest(sig, _signature(key, kind, location, entry))


def _entries(doc: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    return [e for e in list_of(doc.get(name)) if isinstance(e, Mapping)]


def _in_force(doc: Mapping[str, Any], key: bytes, location: str) -> frozenset[str] | None:
    """The nonces of the pauses in force, as the last signed write left them (None: the set is
    missing or its signature does not match)."""
    held = mapping_of(doc.get("in_force"))
    nonces = [n for n in list_of(held.get("nonces")) if isinstance(n, str)]
    sig = held.get("sig")
    if not isinstance(sig, str) or not hmac.compare_digest(sig, _in_force_signature(key, location, nonces)):
        return None
    return frozenset(nonces)


@dataclass(frozen=True)
class _Recognised:
    """What a stored pause is recognised by, read once a document (a document may hold tens of
    thousands of pauses: never a scan of the log for each)."""

    location: str
    key: bytes | None
    logged: frozenset[tuple[Any, ...]]  # (action, target, by, at, nonce) of every log entry
    in_force: frozenset[str] | None  # the signed set in force (None: missing or forged)
    #: With the key: per target, when a signed resume of it was last logged. A signed set in force
    #: restored with its old pause (a partial replay of the document, issue 83) cannot outlive
    #: the signed resume the log still holds.
    resumed: Mapping[Any, float] = field(default_factory=dict)

    @classmethod
    def of(cls, doc: Mapping[str, Any], location: str) -> _Recognised:
        key = _key()
        logged = frozenset((e.get("action"), e.get("target"), e.get("by"), e.get("at"), e.get("nonce"))
                           for e in _entries(doc, "log")) if key is None else frozenset()
        resumed: dict[Any, float] = {}
        if key is not None:
            for e in _entries(doc, "log"):
                at = finite(e.get("at"))
                if (e.get("action") == "resume" and at is not None and at > resumed.get(e.get("target"), -1.0)
                        and _verified(key, LOG, location, e)):
                    resumed[e.get("target")] = at
        return cls(location, key, logged, None if key is None else _in_force(doc, key, location), resumed)

    def unrecognised(self, entry: Mapping[str, Any]) -> str | None:
        """Why a stored pause is not one memwal wrote in this state and still in force (None:
        it is). See the module docstring."""
        if entry.get("action", "pause") != "pause":
            return f"a {shown(str(entry.get('action')))[:20]} log entry, not a pause"
        if self.key is None:
            if ("pause", entry.get("target"), entry.get("by"), entry.get("at"), entry.get("nonce")) not in self.logged:
                return "no entry in the control log: not written by memwal fleet pause (forged?)"
            return None
        if not _verified(self.key, PAUSE, self.location, entry):
            return (f"not signed with the fleet's key ({KEY_ENV}) for this state: forged, copied from elsewhere, "
                    "or written without the key")
        if self.in_force is None:
            return "the state's signed list of pauses in force is missing or forged"
        if entry.get("nonce") not in self.in_force:
            return "no longer in force: resumed, and replayed since"
        at, resumed = finite(entry.get("at")), self.resumed.get(entry.get("target"))
        if resumed is not None and (at is None or resumed >= at):
            return "no longer in force: the log holds its signed resume, and the pause was replayed since"
        return None


def stored_pauses(doc: Mapping[str, Any], location: str) -> list[Pause]:
    """Every pause ``controls.json`` (of the state at ``location``) holds (well-formed ones: a
    target of at most :data:`~memwal.fleet.controls.MAX_TARGET` characters), each with why it
    is not recognised (``forged``), if so."""
    recognised = _Recognised.of(doc, location_of(location))
    return [Pause(target, _text(p.get("by")), _text(p.get("reason")), finite(p.get("at")),
                  forged=recognised.unrecognised(p))
            for p in _entries(doc, "pauses")
            if isinstance(target := p.get("target"), str) and 0 < len(target) <= MAX_TARGET]


def checked_log(doc: Mapping[str, Any], location: str) -> list[dict[str, Any]]:
    """The control log, each entry with ``forged``: why it is not one memwal wrote (with the
    fleet's key set: its signature does not match this state), or None."""
    key = _key()
    location = location_of(location)
    out = []
    for e in _entries(doc, "log"):
        forged = None
        if key is not None and not _verified(key, LOG, location, e):
            forged = f"not signed with the fleet's key ({KEY_ENV}) for this state"
        out.append({"action": _text(e.get("action"))[:20], "target": _text(e.get("target")), "by": _text(e.get("by")),
                    "reason": _text(e.get("reason")), "at": finite(e.get("at")), "forged": forged})
    return out


def _text(value: Any) -> str:
    return str(value or "")[:MAX_TEXT]


# -- writing (memwal fleet pause / resume / cancel)


def pause(state: FleetState, target: str, *, by: str, reason: str, now: float) -> dict[str, Any]:
    """Pause ``target`` (a table URI, a source, a glob; recorded as :func:`canonical_target`
    spells it) in the state; the new controls document. Signed with the fleet's key when one is
    set."""
    _required(by, reason)
    target = canonical_target(target)
    if len(target) > MAX_TARGET:
        raise BadInputError(f"pause: the target is longer than {MAX_TARGET} characters")
    location = location_of(state.uri)

    def change(doc: dict[str, Any]) -> dict[str, Any]:
        pauses = [p for p in _entries(doc, "pauses") if p.get("target") != target]
        if is_glob(target) and len([p for p in pauses if is_glob(str(p.get("target")))]) >= MAX_GLOB_PAUSES:
            raise BadInputError(f"pause {shown(target)}: {MAX_GLOB_PAUSES} glob pauses already: resume one first "
                                "(or pause the tables or sources by name)")
        entry = {"target": target, "by": by[:MAX_TEXT], "reason": reason[:MAX_TEXT], "at": now,
                 "nonce": secrets.token_hex(16)}
        pauses.append(_signed(PAUSE, location, entry))
        logged = _logged(doc, location, {**entry, "action": "pause"}, pauses)
        return _written(doc, location, pauses, logged, added=str(entry["nonce"]))

    return state.update("controls.json", change)


def resume(state: FleetState, target: str, *, by: str, reason: str, now: float) -> dict[str, Any]:
    """Lift the state's pause of ``target``; the new controls document. A target the state has
    not paused is bad input, and nothing is written (a pause in the policy file is lifted by
    editing the file)."""
    _required(by, reason)
    names = {target.strip(), canonical_target(target)}
    location = location_of(state.uri)

    def change(doc: dict[str, Any]) -> dict[str, Any]:
        before = _entries(doc, "pauses")
        kept = [p for p in before if p.get("target") not in names]
        if len(kept) == len(before):
            paused = ", ".join(shown(str(p.get("target"))) for p in before[:10]) or "nothing"
            raise BadInputError(f"{shown(target)}: not paused in the fleet's state {state.uri}, nothing to resume "
                                f"(paused there: {paused}; a pause in the policy file is lifted by editing the file)")
        lifted = next(str(p.get("target")) for p in before if p.get("target") in names)
        entry = {"action": "resume", "target": lifted, "by": by, "reason": reason, "at": now,
                 "nonce": secrets.token_hex(16)}
        return _written(doc, location, kept, _logged(doc, location, entry, kept))

    return state.update("controls.json", change)


def log_action(state: FleetState, action: str, target: str, *, by: str, reason: str, now: float) -> None:
    """Log an action taken elsewhere (a cancel: :mod:`memwal.lease.cancel`)."""
    location = location_of(state.uri)
    entry = {"action": action, "target": canonical_target(target), "by": by, "reason": reason, "at": now,
             "nonce": secrets.token_hex(16)}
    state.update("controls.json", lambda doc: {**doc, "log": _logged(doc, location, entry, _entries(doc, "pauses"))})


def _signed(kind: str, location: str, entry: dict[str, Any]) -> dict[str, Any]:
    key = _key()
    return {**entry, "sig": _signature(key, kind, location, entry)} if key is not None else entry


def _written(doc: Mapping[str, Any], location: str, pauses: list[Mapping[str, Any]], logged: list[Any],
             added: str | None = None) -> dict[str, Any]:
    """The document with these pauses and log; with the fleet's key, the signed set of the
    nonces in force: those of the set the document held whose pause this write keeps, and the
    pause it adds (``added``). A pause the set did not hold never enters it but by being
    written."""
    out = {**doc, "pauses": pauses, "log": logged}
    key = _key()
    if key is None:
        out.pop("in_force", None)
        return out
    held = _in_force(doc, key, location) or frozenset()
    kept = {str(p.get("nonce")) for p in pauses if _verified(key, PAUSE, location, p)}
    nonces = sorted((held & kept) | ({added} if added is not None else set()))
    out["in_force"] = {"nonces": nonces, "sig": _in_force_signature(key, location, nonces)}
    return out


def _logged(doc: Mapping[str, Any], location: str, entry: dict[str, Any],
            pauses: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The log with ``entry`` added: its last :data:`MAX_LOG` entries, and before them the
    entry of every pause in force (a pause is recognised by it without the key)."""
    entry = {**entry, "by": str(entry["by"])[:MAX_TEXT], "reason": str(entry["reason"])[:MAX_TEXT]}
    entries = [*_entries(doc, "log"), _signed(LOG, location, entry)]
    live = {("pause", p.get("target"), p.get("by"), p.get("at"), p.get("nonce")) for p in pauses}
    recent = entries[-MAX_LOG:]
    older = [e for e in entries[:-MAX_LOG]
             if (e.get("action"), e.get("target"), e.get("by"), e.get("at"), e.get("nonce")) in live]
    return older + recent


def _required(by: str, reason: str) -> None:
    if not by.strip() or not reason.strip():
        raise BadInputError("say who you are (--by) and why (--reason): both are recorded with the change")


__all__ = ["KEY_ENV", "MAX_LOG", "authenticated", "canonical_target", "checked_log", "location_of", "log_action",
           "pause", "resume", "stored_pauses"]
