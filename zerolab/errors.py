"""The one exception type for bad user input."""


class UserError(Exception):
    """Bad input the user can fix: the message names the key, file or line and the fix.

    The `zerolab` command prints it and exits with status 2.
    """
