"""The one exception type for mistakes a user can fix (bad config, bad data, bad paths).

The command line prints a `UserError` as a single line and exits non-zero; anything else is a bug
and keeps its traceback.
"""


class UserError(Exception):
    """A problem in the user's input: the message says what, where, and how to fix it, on one line."""

    def __init__(self, message: str):
        super().__init__(one_line(message))

    def lines(self) -> list[str]:
        """What the command line prints, one `error:` line each."""
        return [str(self)]


def one_line(message: str) -> str:
    """`message` with line breaks and other unprintable characters written as escapes (a label or key
    quoted from a user's file may hold them), so that an error is always exactly one line."""
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message)


def first_line(exc: Exception) -> str:
    """The first line of a library's error, to quote inside one of ours (its type when it says nothing)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:200] if lines else type(exc).__name__


class ConfigError(UserError):
    """A bad config key or value; the message names the dotted key."""

    def __init__(self, key: str, problem: str, where: str = ""):
        self.key = key
        location = f" ({where})" if where else ""
        super().__init__(f"config key '{key}'{location}: {problem}")


class ConfigErrors(ConfigError):
    """Every problem one config load found; each keeps its own key and line."""

    def __init__(self, errors: list[ConfigError]):
        self.errors, self.key = errors, errors[0].key
        UserError.__init__(self, f"{len(errors)} config problems: " + "; ".join(map(str, errors)))

    def lines(self) -> list[str]:
        return [str(error) for error in self.errors]


class DataError(UserError):
    """A bad data file or row; the message names the file and line."""

    def __init__(self, path: str, line: int | None, problem: str):
        self.path = path
        self.line = line
        at = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{at}: {problem}")
