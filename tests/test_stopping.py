"""SIGTERM while a bench level's asyncio loop runs: the run stops with Terminated, and every loop is closed.

Real signals, raised in this process (`signal.raise_signal` runs the handler in the main thread at once),
at three points: while asyncio makes the loop, while the coroutine runs, and while asyncio tears the
loop down. Raised inside asyncio's own set-up, the signal used to leave an unclosed loop that printed a
traceback at exit after the clean "stopped by SIGTERM" (a fresh Debian's test run found it).
"""

from __future__ import annotations

import asyncio
import gc
import signal
import warnings

import pytest
from soarlab import stopping


@pytest.fixture
def handlers():
    """stopping's handlers for this test; the process's own afterwards."""
    saved = {s: signal.getsignal(s) for s in stopping.SIGNALS}
    stopping.install()
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


@pytest.fixture
def loops(monkeypatch) -> list[asyncio.AbstractEventLoop]:
    """Every event loop asyncio.run makes during the test."""
    made: list[asyncio.AbstractEventLoop] = []
    new_event_loop = asyncio.runners.events.new_event_loop

    def recording():
        made.append(new_event_loop())
        return made[-1]

    monkeypatch.setattr(asyncio.runners.events, "new_event_loop", recording)
    return made


def signal_after(monkeypatch, module, name: str) -> None:
    """Raise SIGTERM right after `module.name` (an asyncio internal) has run."""
    original = getattr(module, name)

    def then_signal(*args, **kwargs):
        result = original(*args, **kwargs)
        signal.raise_signal(signal.SIGTERM)
        return result

    monkeypatch.setattr(module, name, then_signal)


@pytest.mark.parametrize("where", ["set-up", "running", "tear-down"])
def test_sigterm_anywhere_in_the_loop_stops_it_with_every_loop_closed(handlers, loops, monkeypatch, where):
    finished: list[str] = []

    async def level():
        try:
            if where == "running":
                signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(0 if where != "running" else 30)
            finished.append("ran to the end")
        finally:
            finished.append("finally")

    if where == "set-up":
        signal_after(monkeypatch, asyncio.runners.events, "new_event_loop")  # before the runner marks it made
    if where == "tear-down":
        signal_after(monkeypatch, asyncio.runners, "_cancel_all_tasks")
    gc.collect()  # what earlier tests left unclosed warns now, not among this test's warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(stopping.Terminated) as stopped:
            stopping.run_async(level())
        stopped.value.with_traceback(None)  # its frames would keep an unawaited coroutine alive past gc
        gc.collect()
    assert stopped.value.signum == signal.SIGTERM
    assert loops and all(loop.is_closed() for loop in loops)
    assert [str(w.message) for w in caught] == []  # no "unclosed event loop", no "never awaited"
    assert {"set-up": [], "running": ["finally"], "tear-down": ["ran to the end", "finally"]}[where] == finished


def test_without_a_signal_it_returns_what_the_coroutine_returns(handlers):
    async def level():
        await asyncio.sleep(0)
        return 42

    assert stopping.run_async(level()) == 42
    with pytest.raises(stopping.Terminated):  # and the handler raises again outside the loop
        signal.raise_signal(signal.SIGTERM)
