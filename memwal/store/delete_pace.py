"""Tuning: how many threads delete the next batch of directory trees on a local disk.

The best count is the file system's, not ours: on ext4 with a journal the kernel's work is
CPU and shared locks, and one thread deletes fastest; on a disk where every unlink waits (ext4
mounted with ``discard``, a network disk) eight threads overlap the waits and win by far, and
counts in between are no better than the better end on either. So :class:`Pace` finds out per
store, from its own batches, and keeps finding out (a shared disk's speed swings). It decides
speed only: every batch is deleted with the same checks whatever the count. The figures that
chose this, and the bench that re-checks it pays (``bench/gc_many.py --pace``), are in
docs/decisions/0002-adaptive-delete-pace.md.
"""

from __future__ import annotations


class Pace:
    """How many threads unlink and remove the next batch: one or ``most``, found by trying, per store.

    The first batch goes on ``most`` threads, the second on one, and the count that deleted
    faster stays (one must be :data:`GAIN` faster to be chosen: it gives up the overlap that a
    disk's bad moments need). Every :data:`REPROBE` batches one batch tries the other end
    again; a try is a short batch (:data:`TRY_SHARE`), so trying the wrong end costs little.
    Batches too small to judge (:data:`JUDGED_ITEMS`) change nothing."""

    #: The other end must delete this much faster to be switched to.
    GAIN = 1.15
    #: Files and directories a batch must delete to be judged.
    JUDGED_ITEMS = 256
    #: Batches on the chosen count between two tries of the other end.
    REPROBE = 6
    #: A try deletes this share of a batch (on the wrong end a batch is much slower).
    TRY_SHARE = 0.25

    def __init__(self, most: int) -> None:
        self.most = max(1, most)
        self.settled = self.most  # the count chosen
        self.threads = self.most  # the count of the next batch: ``settled``, or the other end while trying it
        self.waited = self.REPROBE - 1  # batches on the chosen count since the last try
        self.rates: dict[int, float] = {}  # threads -> files and directories deleted a second, latest

    def batch(self, trees: int) -> int:
        """How many of ``trees`` (a full batch) the next batch takes: fewer while trying."""
        return trees if self.threads == self.settled else max(1, int(trees * self.TRY_SHARE))

    def took(self, items: int, seconds: float) -> None:
        """A batch on :attr:`threads` threads deleted ``items`` files and directories in ``seconds``."""
        if items < self.JUDGED_ITEMS or self.most == 1:
            return
        rate = self.rates[self.threads] = items / max(seconds, 1e-6)
        if self.threads != self.settled:  # a try of the other end
            if rate >= self.GAIN * self.rates.get(self.settled, 0.0):
                self.settled = self.threads
            self.threads, self.waited = self.settled, 0
            return
        self.waited += 1
        if self.waited >= self.REPROBE:
            self.threads = 1 if self.settled == self.most else self.most
