"""Errors a user can act on: each message is one line that says what was wrong and what to do."""

from __future__ import annotations


class SinklibError(Exception):
    """Base class; the CLI and the figure runner print these as a single line without a traceback."""


class UnknownModelError(SinklibError, KeyError):
    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class DeviceUnavailableError(SinklibError):
    pass


class OfflinePackageMissingError(SinklibError):
    pass


class OfflinePackageCorruptError(SinklibError):
    """An installed offline package's data file is not the one recorded (another size or sha256): a damaged or
    altered install, which would convert into wrong weights; the message names the file and the reinstall command."""


class WrongFamilyError(SinklibError):
    pass


class InputError(SinklibError, ValueError):
    pass


class NotFiniteResultError(SinklibError):
    """A measured result holds NaN or infinity: a computation broke (a value that does not exist is None)."""
