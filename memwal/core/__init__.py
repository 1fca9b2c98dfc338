"""What every room leans on and nothing else: the clock, the named steps tests hold jobs at,
the one retry primitive, the one thread pool, value checks, secrets handling, the version
and the result documents. It imports no other memwal package."""
