"""A wake-up call for a loop that otherwise polls: `Wake.wait(timeout)` returns as soon as `set()` is called, or
after `timeout` seconds. The app's Gradio queue waits on one between its looks for work, woken when an event
joins it or one ends (explorer.ui.gradio_patches.install_idle_queue)."""

from __future__ import annotations

import asyncio


class Wake:
    """A wake-up call for the asyncio loop that waits on it; a server closed and launched again on another loop
    gets a fresh one (an asyncio.Event belongs to the loop it was first awaited on)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def set(self) -> None:
        """Wakes the waiter now, or makes its next wait return at once (from the waiting loop)."""
        if self._event is not None:
            self._event.set()

    async def wait(self, timeout: float) -> None:
        """Until woken or `timeout` seconds have passed; a wake-up is used once."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._event = loop, asyncio.Event()
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            pass
        self._event.clear()
