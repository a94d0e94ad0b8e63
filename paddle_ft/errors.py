"""The one exception type for mistakes a user can fix (bad config, bad data, bad paths).

The command line prints a `UserError` as a single line and exits non-zero; anything else is a bug
and keeps its traceback.
"""


class UserError(Exception):
    """A problem in the user's input: the message says what, where, and how to fix it."""


class ConfigError(UserError):
    """A bad config key or value; the message names the dotted key."""

    def __init__(self, key: str, problem: str, where: str = ""):
        self.key = key
        location = f" ({where})" if where else ""
        super().__init__(f"config key '{key}'{location}: {problem}")


class DataError(UserError):
    """A bad data file or row; the message names the file and line."""

    def __init__(self, path: str, line: int | None, problem: str):
        self.path = path
        self.line = line
        at = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{at}: {problem}")
