"""The one exception type for mistakes a user can fix (bad config, bad data, bad paths).

The command line prints a `UserError` as a single line and exits non-zero; anything else is a bug
and keeps its traceback.
"""


class UserError(Exception):
    """A problem in the user's input: the message says what, where, and how to fix it, on one line."""

    def __init__(self, message: str):
        super().__init__(one_line(message))


def one_line(message: str) -> str:
    """`message` with line breaks and other unprintable characters written as escapes (a label or key
    quoted from a user's file may hold them), so that an error is always exactly one line."""
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message)


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
