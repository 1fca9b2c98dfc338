"""Writers: what pylance users run to write a MemWAL table, made to work with a follower.

- :mod:`memwal.writer.rotating`: :class:`RotatingShardWriter`, a pylance ``ShardWriter`` whose
  base moves: closed and reopened every so often, without losing a put.
"""

from memwal.writer.rotating import DEFAULT_ROTATE_SECONDS, RotatingShardWriter

__all__ = ["DEFAULT_ROTATE_SECONDS", "RotatingShardWriter"]
