"""Adversarial tests: hostile inputs and states (bad options, corrupt files, unsafe paths,
schema changes, secrets); exit 2 means nothing was written, and no row is lost."""
