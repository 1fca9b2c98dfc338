"""Exceptions with the exit code the CLI maps them to (DESIGN.md section 5)."""


class MemWalError(Exception):
    """Any failure of a job: exit code 1."""

    exit_code = 1


class BadInputError(MemWalError):
    """Bad usage or bad input (missing table, corrupt manifest, bad option): exit code 2."""

    exit_code = 2


class LeaseLostError(MemWalError):
    """The job lost its lease or was fenced: it must stop before its next side effect. Exit code 3."""

    exit_code = 3


class LeaseHeldError(MemWalError):
    """Another live holder has the lease: the job did not start. Exit code 3."""

    exit_code = 3


class NotFoundError(BadInputError):
    """An object that must exist does not."""


class PreconditionFailedError(MemWalError):
    """A conditional write lost its race (object exists, or ETag changed)."""
