"""Stopping an attack cleanly: Ctrl-C, SIGTERM and SIGUSR2 (Slurm's pre-emption warning) ask it to stop after
its current step, so that it saves what it has; afterwards the handlers that were there before are back, and
one that was there for the signal received (submitit's requeue on SIGUSR2) still runs."""

from __future__ import annotations

import signal
import threading

from tqdm import tqdm


class StopSignals:
    """``install()`` before the steps, ``stop`` checked between them, ``restore()`` after (in a ``finally``).

    Attributes:
        stop: whether a signal asked the attack to stop.
        signal: the number of that signal (2 for SIGINT, 15 for SIGTERM), or None.
    """

    def __init__(self) -> None:
        self.stop, self.signal, self._previous = False, None, None

    def install(self) -> None:
        self.stop, self.signal, self._previous = False, None, None
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, frame):
            self.stop, self.signal = True, signum
            tqdm.write(f"received signal {signum}: stopping after this step and saving the checkpoint")
        sigs = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGUSR2] if hasattr(signal, "SIGUSR2") else [])
        self._previous = {s: signal.signal(s, handler) for s in sigs}

    def restore(self) -> None:
        previous, self._previous = self._previous or {}, None
        for s, h in previous.items():
            signal.signal(s, h)
        before = previous.get(self.signal)
        if self.signal is not None and callable(before) and self.signal not in (signal.SIGINT, signal.SIGTERM):
            before(self.signal, None)        # e.g. submitit's requeue on SIGUSR2; a stop is already handled


__all__ = ["StopSignals"]
