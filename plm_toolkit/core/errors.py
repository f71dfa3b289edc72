"""Errors that reach the user as one line naming the file, line or config key and what was expected.

The entry points catch ``PlmError`` and print ``error: <message>`` without a traceback; anything else is a bug
and keeps its traceback.
"""


class PlmError(Exception):
    """Base class of the errors a user can fix."""


class ConfigError(PlmError):
    """An impossible or invalid configuration; the message names the key(s) and the fix."""


class DataError(PlmError):
    """A corpus, tokenizer or dataset that cannot be used; the message names the file (and line)."""


class CheckpointError(PlmError):
    """A missing, corrupt or incompatible checkpoint; the message names the path."""


class WriteError(PlmError):
    """An output that could not be written for want of room (a full disk, a quota, a file-size limit); the message
    names the output and the file."""


class TrainingError(PlmError):
    """Training cannot go on (a non-finite loss, repeated fp16 overflow); the message says what to try."""
