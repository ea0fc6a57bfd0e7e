"""Named errors. Library code raises these; only the CLI turns them into exit codes."""


class HetplanError(Exception):
    """Base class of every error hetplan raises on purpose."""


class InputError(HetplanError):
    """Bad user input: a file, field or value that is not what was expected.

    The message names the place (file, field path or value) and what was expected, in one line.
    The CLI prints it and exits with status 2.
    """


class ModelError(InputError):
    """A model that cannot be found, built or traced."""


class InfeasibleError(HetplanError):
    """A plan that cannot run (does not fit in memory, violates a limit); carries the numbers."""


class SettingError(InputError, ValueError):
    """A settings object built with a bad value: an InputError for the CLI (exit 2) and a
    ValueError for library callers that validate arguments the usual way."""


class Interrupted(BaseException):
    """The command got SIGINT (Ctrl-C) or SIGTERM. A BaseException, like KeyboardInterrupt, so
    that no handler of ordinary errors swallows it on the way out (every ``finally`` and
    temporary folder still runs its clean-up); the CLI prints its message in one line and exits
    with 128 + the signal's number, as a shell does for a process the signal killed."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(message)
        self.signum = signum
        self.message = message
        """What was kept and how to go on (the flow that was interrupted adds it)."""

    def with_message(self, message: str) -> "Interrupted":
        return Interrupted(self.signum, message)
