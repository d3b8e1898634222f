"""Errors meant for the user: the CLI prints their message (no traceback) and exits non-zero."""


class UserError(Exception):
    """Bad input: the message names the problem and the way out."""


class ConfigError(UserError):
    """A config key or value that the schema does not allow."""
