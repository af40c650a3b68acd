"""How a `soarlab` process stops on SIGTERM or SIGHUP (DVC stopping a stage, a sweep stopping a trial, a
closed terminal).

The signal is raised as `Terminated` where the program is, so that `finally` blocks stop our servers and
give their leases back. Inside an asyncio loop of ours (`run_async`) it is not raised: raised inside
asyncio's own set-up or tear-down it would leave the loop unclosed, and Python would print that loop's
traceback at exit after the clean "stopped by SIGTERM". There it cancels the loop's main task, as asyncio
does with Ctrl-C, and is raised once the loop is closed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_on_signal: Callable[[int], None] | None = None  # while run_async runs: what a signal does instead of raising


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the program is, so that `finally` blocks stop our servers."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _handle(signum: int, _frame) -> None:
    if _on_signal is None:
        raise Terminated(signum)
    _on_signal(signum)


def install() -> None:
    """Raise SIGTERM and SIGHUP as Terminated in this process (signal handlers live in the main thread only)."""
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            signal.signal(signum, _handle)


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main). A SIGTERM or SIGHUP meanwhile cancels `main` and is raised as Terminated once
    the loop is closed, wherever in asyncio it came."""
    import asyncio  # here: every `soarlab` process installs the handlers, few of them run a loop

    global _on_signal
    received: list[int] = []
    tasks: list = []  # main's task, once the loop runs it

    async def guarded():
        tasks.append(asyncio.current_task())
        if received:  # it came while asyncio made the loop: main never starts
            main.close()
            return None
        return await main

    def cancel_main(signum: int) -> None:
        received.append(signum)
        if tasks and not tasks[0].get_loop().is_closed():
            tasks[0].cancel()
            tasks[0].get_loop().call_soon_threadsafe(lambda: None)  # wake the loop's select, as asyncio's Ctrl-C does

    previous, _on_signal = _on_signal, cancel_main
    try:
        return asyncio.run(guarded())
    except asyncio.CancelledError:
        if not received:
            raise
    finally:
        _on_signal = previous
        if received:
            raise Terminated(received[0])
