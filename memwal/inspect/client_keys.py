"""The keys verify reads the clients' view through: one of each listed generation.

A client (pylance's ``lsm_scanner()``, lance-context) merges the base with every listed
generation and decodes every column of the rows it returns. Verify must see a generation a
client cannot decode (issue 56), but reading the whole view holds the whole table decoded. A
filter on one key each listed generation holds makes the reader open every generation and
decode a row of each, in memory bounded by the number of generations. Keys that cannot be
written as a SQL literal (or a composite key) fall back to the first :data:`PROBE_ROWS` rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from memwal.errors import MemWalError
from memwal.table import Table
from memwal.table.generations import open_generation
from memwal.table.paths import generation_key

#: Rows read when no filter can name the keys.
PROBE_ROWS = 1000
#: Generations probed at most (each costs an open).
MAX_PROBED = 2000


def _literal(value: object) -> str | None:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return None


def probe_filter(table: Table, pk: list[str], generations: Sequence[tuple[str, int, str]]) -> str | None:
    """A SQL filter naming one key of each listed generation (None: no such filter)."""
    if len(pk) != 1 or not generations:
        return None
    literals: set[str] = set()
    for shard_id, _g, path in generations[:MAX_PROBED]:
        try:
            gen = open_generation(table.store.uri_for(generation_key(shard_id, path)), table.storage_options)
            rows = gen.to_table(columns=[pk[0]], limit=1).column(0).to_pylist() if pk[0] in gen.schema.names else []
        except (MemWalError, OSError, ValueError, RuntimeError):
            continue  # the read itself will say why
        for value in rows:
            lit = _literal(value)
            if lit is None:
                return None
            literals.add(lit)
    if not literals:
        return None
    name = pk[0] if pk[0].isidentifier() else "`" + pk[0].replace("`", "``") + "`"
    return f"{name} IN ({', '.join(sorted(literals))})"


__all__ = ["MAX_PROBED", "PROBE_ROWS", "probe_filter"]
