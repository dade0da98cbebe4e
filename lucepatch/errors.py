"""The one error path.

Errors a user causes (bad input, a missing tool) are LucepatchError subclasses: main() prints
their message as ONE line on stderr and exits with their code, never a traceback. Anything
else escaping a verb is a bug: main() prints the traceback so it can be reported.
"""

# Exit codes shared by every verb (DESIGN.md "Verbs").
EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # a check failed: conflict, lint error, not-proven, regression, invalid run
EXIT_USAGE = 2  # usage or bad input
EXIT_ENVIRONMENT = 3  # environment missing: no docker daemon, no GPU, no compiler, no checkout


class LucepatchError(Exception):
    """An expected failure the user can fix; the message names the thing and the fix."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str):
        # One line, always: multi-line text from subprocesses is folded.
        super().__init__(" ".join(str(message).split()))


class UsageError(LucepatchError):
    exit_code = EXIT_USAGE


class EnvironmentMissing(LucepatchError):
    exit_code = EXIT_ENVIRONMENT


class CheckFailed(LucepatchError):
    exit_code = EXIT_CHECK_FAILED
