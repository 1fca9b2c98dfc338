"""The one harness every bench runs on (imports nothing itself: see :mod:`bench`).

- :mod:`~bench.harness.processes`: whole processes, timed from start to exit (wall and CPU seconds,
  peak RSS through :mod:`~bench.harness.peak`), ``memwal`` as users run it, the Python path they need;
- :mod:`~bench.harness.stats`: medians, spreads, quantiles and ratios of interleaved runs;
- :mod:`~bench.harness.results`: a case's run: its document (machine, load, config), its folders,
  its JSON, chart and summary under ``--out``; the arguments every case shares;
- :mod:`~bench.harness.timers`: seconds per named function of one ``memwal`` command;
- :mod:`~bench.harness.requests`: requests counted by the servers themselves (moto, Azurite).
"""
