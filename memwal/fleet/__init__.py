"""Fleets: many tables, found from sources, ranked by the debt their state shows, maintained
under a budget by the one cycle runner.

- :mod:`memwal.fleet.sources`: table URIs, roots searched link-safely, Lance Namespaces;
- :mod:`memwal.fleet.probe`: the cheap reads (listings, one manifest) a plan is made from;
- :mod:`memwal.fleet.policy`: thresholds, weights, batch bounds, job options; overrides;
- :mod:`memwal.fleet.debt`: which jobs a table needs, why, and its debt;
- :mod:`memwal.fleet.plan`: the ranked plan (read only);
- :mod:`memwal.fleet.run`: rounds of plan-then-run under ``--workers`` and ``--max-seconds``;
- :mod:`memwal.fleet.status`, :mod:`memwal.fleet.page`: the bounded view and its page.
"""
