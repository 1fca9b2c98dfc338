"""A table's own maintenance policy: option values its owner stores with the table (issue 84).

A follower started with ``--expire-versions 600`` and a cycle run by hand later with the 7-day
default judge the same table two ways. So the owner records the values that belong to the table
(how long versions, the reader grace, a quiet writer and the run history are kept; how much one
merge takes) in Lance's own table config, under ``memwal.policy.<option>`` (``memwal policy
TABLE --set grace_seconds=3600``): versioned with the table, one commit each change, read by every
job, the cycle, the follower and the fleet from the table itself.

Precedence, per option: what the run was given (a flag, an API keyword, the fleet's policy file)
over the table's policy over memwal's default; a given value that differs from the table's
policy is logged once per run, naming both. A stored value is checked as the flag's value is;
one that does not pass is not used (the default applies, as if unset), and ``memwal policy`` and
``memwal status`` name it: a record anyone who can write the table can write may choose among
valid values, never break a job.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

from memwal.actions.options import GcOptions, JobOptions, MergeOptions, flag_of, spec_of
from memwal.core.document import Document
from memwal.core.text import clip
from memwal.errors import BadInputError, MemWalError

if TYPE_CHECKING:
    from memwal.table import Table

log = logging.getLogger(__name__)

#: Lance table config keys of the policy: this prefix and the option's name.
POLICY_PREFIX = "memwal.policy."
#: The options a table's policy may set, and the options class that checks each.
POLICY_OPTIONS: dict[str, type[JobOptions]] = {
    "grace_seconds": GcOptions,
    "expire_versions": GcOptions,
    "writer_idle_seconds": GcOptions,
    "history_retention": GcOptions,
    "orphan_age_seconds": GcOptions,
    "max_generations": MergeOptions,
    "max_rows": MergeOptions,
    "max_bytes": MergeOptions,
}

Opts = TypeVar("Opts", bound=JobOptions)


@dataclass(frozen=True)
class TablePolicy(Document):
    """What the table's config says (``memwal policy TABLE --json``).

    Attributes:
        values: The options it sets, as stored (text), each checked.
        invalid: Stored values that do not pass their option's check: not used, each with why.
    """

    values: dict[str, str]
    invalid: dict[str, str]

    def parsed(self) -> dict[str, Any]:
        """The valid values as the options take them (``expire_versions`` never: None)."""
        return {name: _parse(name, text) for name, text in self.values.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"values": self.values, "invalid": self.invalid}


#: Stored keys that are not used, named one by one (the rest are counted): whoever can write the
#: table's config writes as many as they like, and every job logs what it does not use.
MAX_INVALID_NAMED = 10


def read_policy(config: Mapping[str, str]) -> TablePolicy:
    """The policy in a Lance table config (``ds.config()``). What is not used is named clipped,
    at most :data:`MAX_INVALID_NAMED` of it, then counted: the config is the table's storage."""
    values: dict[str, str] = {}
    invalid: dict[str, str] = {}
    unnamed = 0
    for key, text in sorted(config.items()):
        if not key.startswith(POLICY_PREFIX):
            continue
        name = key.removeprefix(POLICY_PREFIX)
        try:
            if name not in POLICY_OPTIONS:
                raise BadInputError(f"not an option a table's policy sets ({', '.join(POLICY_OPTIONS)})")
            _parse(name, text)
            values[name] = text
        except BadInputError as exc:
            if len(invalid) < MAX_INVALID_NAMED:
                invalid[clip(name, 80)] = clip(str(exc).removeprefix(f"{name}: "), 200)
            else:
                unnamed += 1
    if unnamed:
        invalid[f"({unnamed:,} more keys)"] = f"not named here: the table config's other {POLICY_PREFIX}* keys"
    return TablePolicy(values, invalid)


def table_policy(table: Table) -> TablePolicy:
    """The policy of the table's latest version."""
    return read_policy(table.manifest().config)


def with_policy(table: Table, options: Opts) -> Opts:
    """``options`` with the table's policy for every option the run was not given (module
    docstring); a given value that differs from the policy's is logged."""
    named = {f.name: f for f in fields(options)}
    if not named.keys() & POLICY_OPTIONS.keys():
        return options
    try:
        policy = read_policy(table.newest_read().config)  # a run reads the latest anyway: no read more
    except (MemWalError, OSError, ValueError) as exc:  # the job's own open says what is wrong with the table
        log.debug("%s: no policy read: %s", table.uri, exc)
        return options
    if policy.invalid:  # one line a run, whatever the config holds
        log.warning("%s: the table's policy is not used for %s (memwal policy %s says why)", table.uri,
                    ", ".join(policy.invalid), table.uri)
    given = options.given
    changes = {}
    for name, value in policy.parsed().items():
        if name not in named:
            continue
        if name in given:
            if getattr(options, name) != value:
                flag = flag_of(name, spec_of(named[name]))
                log.info("%s: %s %s overrides the table's policy (%s) for this run", table.uri, flag,
                         _shown(getattr(options, name)), _shown(value))
            continue
        changes[name] = value
    return options.defaulted(**changes) if changes else options


def policy_changes(config: Mapping[str, str], set_values: Mapping[str, str],
                   unset: list[str]) -> dict[str, str | None]:
    """The values a change of policy writes over the table config ``config`` (None: the key
    removed), each value checked as its flag's, those it holds already left out. BadInputError,
    naming the option, for anything else (nothing written)."""
    both = set(set_values) & set(unset)
    if both:
        raise BadInputError(f"policy {sorted(both)[0]}: both set and unset")
    for name in [*set_values, *(n for n in unset if POLICY_PREFIX + n not in config)]:  # a stored key may go
        if name not in POLICY_OPTIONS:
            raise BadInputError(f"policy {name!r}: not an option a table's policy sets (one of "
                                f"{', '.join(POLICY_OPTIONS)})")
    changes: dict[str, str | None] = {}
    for name, text in set_values.items():
        _parse(name, text)
        changes[POLICY_PREFIX + name] = str(text).strip()
    changes.update({POLICY_PREFIX + name: None for name in unset if POLICY_PREFIX + name in config})
    return {k: v for k, v in changes.items() if config.get(k) != v}


def change_policy(table: Table, set_values: Mapping[str, str], unset: list[str]) -> TablePolicy:
    """Set and unset options of the table's policy: one commit of Lance's table config (none when
    nothing changes). Returns the policy after it."""
    changes = policy_changes(table.manifest().config, set_values, unset)
    if changes:
        table.dataset().update_config(changes)
    return table_policy(table)


def _parse(name: str, text: object) -> Any:
    """A stored value as its option takes it (BadInputError naming the option when it does not pass)."""
    options = POLICY_OPTIONS[name].from_kwargs(**{name: text})
    return getattr(options, name)


def _shown(value: Any) -> str:
    return "never" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


__all__ = ["POLICY_OPTIONS", "POLICY_PREFIX", "TablePolicy", "change_policy", "read_policy", "table_policy",
           "with_policy"]
