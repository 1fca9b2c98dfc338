"""``python -m memwal.cli``: the ``memwal`` program."""

from memwal.cli.main import main

raise SystemExit(main())
