"""The work each command does, with typed results, between the library and the command line: `commands/` only
parses flags and maps these results and errors to exit codes and lines; `paddle_ft.train()` calls `training`."""
