"""Errors raised by the OVSDB access layer.

Every failure that leaves ``pacific.ovn`` is one of these, so callers catch
``OvnError`` and the message always says what failed: the database (remote),
the command(s) of the transaction and the OVSDB server's own error text.
"""

from __future__ import annotations

from typing import Iterable


class OvnError(Exception):
    """Base class of every error of the OVSDB access layer."""


class OvnConnectionError(OvnError):
    """The OVSDB server could not be reached (or its schema fetched)."""

    def __init__(self, remote: str, schema: str, cause: str):
        self.remote = remote
        self.schema = schema
        self.cause = cause
        super().__init__(
            f"cannot connect to OVSDB {schema} at {remote}: {cause}")


class OvnTransactionError(OvnError):
    """A transaction failed.

    Attributes:
        remote: the database the transaction was sent to.
        commands: text of every command of the transaction, in order.
        failed_command: text of the command that failed, when one command
            is to blame (e.g. a row it refers to does not exist); None when
            the server refused the transaction as a whole.
        detail: the error text (from ovsdb-server or from the command).
    """

    def __init__(self, remote: str, commands: Iterable[object], detail: str,
                 failed_command: object | None = None):
        self.remote = remote
        self.commands = [str(c) for c in commands]
        self.failed_command = (str(failed_command)
                               if failed_command is not None else None)
        self.detail = detail
        super().__init__(self._message())

    def _message(self) -> str:
        n = len(self.commands)
        if self.failed_command is not None:
            where = f"command {self.failed_command}"
        elif n == 1:
            where = f"command {self.commands[0]}"
        else:
            shown = "; ".join(self.commands[:3])
            more = f"; ... ({n - 3} more)" if n > 3 else ""
            where = f"transaction of {n} commands [{shown}{more}]"
        return f"OVSDB transaction on {self.remote} failed: {where}: {self.detail}"


class OvnTimeoutError(OvnTransactionError):
    """The transaction was not committed in time (e.g. server down)."""
