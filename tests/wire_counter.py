"""A loopback TCP forwarder that counts network round trips between clients and a server.

Put it in front of a server (``WireCounter(host, port)``; connect to ``counter.port``) and it
passes every byte through unchanged. A round trip is counted each time a client sends after the
server last spoke on that connection (or sends first): a client that sends a batch of statements
and waits for their results costs one, a client that waits for each statement costs one each.
``silent`` makes it a network cut that closes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass
class _Link:
    server_spoke: bool = True


@dataclass
class WireCounter:
    host: str
    port_to: int
    round_trips: int = 0
    port: int = 0
    silent: bool = False
    """Swallow what either side sends, keeping both connections open: a peer that vanished
    without a word (a network cut)."""
    swallowed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once a client sent something while ``silent`` (a call is waiting on the cut)."""
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set[asyncio.Task[None]])
    _writers: set[asyncio.StreamWriter] = field(default_factory=set[asyncio.StreamWriter])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def take(self) -> int:
        """The round trips since the last take."""
        count, self.round_trips = self.round_trips, 0
        return count

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port_to)
        self._writers.add(up_writer)
        link = _Link()
        both = [
            asyncio.ensure_future(self._pipe(reader, up_writer, link, client=True)),
            asyncio.ensure_future(self._pipe(up_reader, writer, link, client=False)),
        ]
        self._tasks.update(both)
        await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
        for task in both:
            task.cancel()
        for w in (writer, up_writer):
            w.close()
        self._tasks.difference_update(both)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: _Link,
        *,
        client: bool,
    ) -> None:
        while data := await reader.read(65536):
            if self.silent:
                if client:
                    self.swallowed.set()
                continue
            if client:
                if link.server_spoke:
                    self.round_trips += 1
                link.server_spoke = False
            else:
                link.server_spoke = True
            writer.write(data)
            await writer.drain()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await task
        # A connection's handler may not run again before the loop closes: close every
        # stream here, so none is left for the garbage collector on a closed loop.
        for writer in list(self._writers):
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
        self._writers.clear()
        if self._server is not None:
            await self._server.wait_closed()
