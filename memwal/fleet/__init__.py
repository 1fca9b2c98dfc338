"""Fleets: many tables, found from sources, ranked by the debt their state shows, maintained
under a budget by the one cycle runner, with a state every machine shares.

- :mod:`memwal.fleet.sources`: table URIs, roots searched link-safely, Lance Namespaces;
- :mod:`memwal.fleet.probe`, :mod:`memwal.fleet.facts`, :mod:`memwal.fleet.cache`: the cheap reads
  (listings, one manifest) a plan is made from, what they tell, and the cache that saves them;
- :mod:`memwal.fleet.policy`, :mod:`memwal.fleet.controls`, :mod:`memwal.fleet.quota`: thresholds,
  weights, batch bounds, job options, service levels; pauses, quiet hours, quotas;
- :mod:`memwal.fleet.debt`, :mod:`memwal.fleet.slo`: which jobs a table needs, why, its debt; breaches;
- :mod:`memwal.fleet.plan`: the ranked plan (read only) and the order work starts in;
- :mod:`memwal.fleet.state`, :mod:`memwal.fleet.shared`, :mod:`memwal.fleet.report`,
  :mod:`memwal.fleet.runs`: the shared state, a plan with it, the last plan's report, the run log;
- :mod:`memwal.fleet.run`: rounds of plan-then-run under ``--workers`` and ``--max-seconds``;
- :mod:`memwal.fleet.status`, :mod:`memwal.fleet.page`: the bounded view and its page.
"""
