"""The run history: every job run on a table, whatever started it, in the table's own store.

- :mod:`memwal.history.record`: a run's record, its outcome and the job's figures;
- :mod:`memwal.history.log`: where records live, written with conditional puts, pruned by GC;
- :mod:`memwal.history.run`: the run being recorded (versions it commits, commit properties);
- :mod:`memwal.history.timeline`: ``memwal history``: runs, and the versions others committed.
"""
