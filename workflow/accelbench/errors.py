"""Exceptions with messages meant for users: each names what was wrong and how to fix it."""


class AccelbenchError(Exception):
    """Base class: an error the user can act on (printed without a traceback by the CLI)."""


class ConfigError(AccelbenchError):
    """The workflow configuration or a system file is invalid."""


class SystemMismatchError(AccelbenchError):
    """The requested system's backend or device count is not present on this machine."""


class DataError(AccelbenchError):
    """An input file is missing or unreadable."""


class ResultError(AccelbenchError):
    """A result file is missing, corrupt, or would be overwritten."""


class CampaignError(AccelbenchError):
    """A campaign file (``campaigns/*.yaml``, a reference run's ``parts:``) is invalid or lacks the part asked for."""
