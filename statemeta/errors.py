"""statecat's exceptions: one root, a few subclasses that carry where the problem is.

Every error a user can cause (a bad path, a damaged file, an unknown state) is a ``StatecatError``
whose message names the file, the byte offset, what was expected and what to do about it.
"""

from __future__ import annotations

import difflib
import signal
from collections.abc import Iterable


class StatecatError(Exception):
    """Root of every error statecat raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        offset: int | None = None,
        operator: str | None = None,
        state: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.offset = offset
        self.operator = operator
        self.state = state
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.file is not None:
            where.append(f"file {self.file}")
        if self.offset is not None:
            where.append(f"byte offset {self.offset}")
        if self.operator is not None:
            where.append(f"operator {self.operator}")
        if self.state is not None:
            where.append(f"state {self.state!r}")
        text = self.message
        if where:
            text = f"{text} ({', '.join(where)})"
        if self.hint:
            text = f"{text}. {self.hint}"
        return text


class SavepointNotFoundError(StatecatError):
    """The path is not a savepoint or checkpoint directory (no readable `_metadata`)."""


class FormatError(StatecatError):
    """Bytes do not have the layout Flink writes: truncated, garbled or an unknown magic/tag."""


class UnsupportedError(StatecatError):
    """A well-formed construct statecat does not read yet (version, handle kind, backend format)."""


class StateFileError(StatecatError):
    """A state file the metadata refers to is missing or unreadable."""


class LookupFailedError(StatecatError):
    """An operator or state the user named does not exist, or the name is ambiguous."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the work (a KeyboardInterrupt, so code that lets Ctrl-C through
    lets both through). The CLI prints it as one line and exits 128 + ``signum``, as a process
    the signal killed would."""

    def __init__(self, signum: int, message: str | None = None) -> None:
        self.signum = signum
        self.message = message or f"interrupted by {signal.Signals(signum).name}"
        super().__init__(self.message)


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A 'Did you mean ...?' suffix for an unknown name, or the list of valid names."""
    candidates = sorted(set(candidates))
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
    if close:
        return "Did you mean " + " or ".join(repr(c) for c in close) + "?"
    if not candidates:
        return "There are none."
    shown = ", ".join(repr(c) for c in candidates[:20])
    more = f" and {len(candidates) - 20} more" if len(candidates) > 20 else ""
    return f"Known: {shown}{more}."
