"""Ctrl-C at safe points only: the search driver's SIGINT handling (`HeldSigint`)."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class HeldSigint:
    """While `held`, a Ctrl-C (SIGINT) is remembered instead of raised, and `check` raises it at
    a safe point; a second one while one is pending raises at once, except while `shielded`
    (the simulator's compiled code runs then: an exception raised inside it surfaces as a
    SystemError, so every Ctrl-C waits for it to return). Active in the main thread when
    SIGINT has Python's default handler."""

    def __init__(self):
        self.active = (threading.current_thread() is threading.main_thread()
                       and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        self.held = self.shielded = self.pending = False
        self._old = None

    def __enter__(self):
        if self.active:
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self.active:
            signal.signal(signal.SIGINT, self._old)
        self.pending = False  # held during the last write: the search is over anyway

    def _handle(self, signum, frame) -> None:
        if self.shielded or (self.held and not self.pending):
            self.pending = True
            return
        self.pending = False
        raise KeyboardInterrupt

    @contextmanager
    def hold(self):
        before, self.held = self.held, True
        try:
            yield
        finally:
            self.held = before

    @contextmanager
    def shield(self):
        before, self.shielded = self.shielded, True
        try:
            yield
        finally:
            self.shielded = before

    def check(self) -> None:
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt
