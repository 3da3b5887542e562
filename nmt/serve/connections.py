"""Clients that leave and a server that stops: what becomes of their requests, quietly.

A client that disconnects before its answer is not the server's fault: its request ends without a line in the
log, and the job it queued is cancelled, so the batcher never searches the sentences it has not started
(nmt.serve.batcher). A server told to stop (SIGTERM, Ctrl-C) answers at once, with a 503 and the connection
closed, the requests whose body has not fully come, instead of waiting its whole drain for clients that may never
send it; idle kept-alive connections are closed by uvicorn at once, and requests already read are translated and
answered. Should the drain run out, the requests still waiting get a 503 instead of a traceback in the log."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any, Awaitable, Callable, MutableMapping

import uvicorn
from starlette.requests import ClientDisconnect

from nmt.serve.request_body import error_response

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Message, Receive, Send], Awaitable[None]]


class ServerStopping(Exception):
    """The server began to stop while a request's body was still coming."""


class StoppingServer(uvicorn.Server):
    """uvicorn's server, which tells the app it is stopping (``stopping``) before its graceful shutdown."""

    def __init__(self, config: uvicorn.Config, stopping: asyncio.Event):
        super().__init__(config)
        self.stopping = stopping

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.stopping.set()
        await super().shutdown(sockets=sockets)


class RequestWatch:
    """ASGI middleware: each HTTP request runs as a task of its own, which is cancelled when its client
    disconnects before the answer (the cancellation reaches the batcher's job through its future), and whose body
    stops being waited for once ``stopping`` is set."""

    def __init__(self, app: App, stopping: asyncio.Event):
        self.app = app
        self.stopping = stopping

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        exchange = Exchange(receive, send, self.stopping)
        task = asyncio.ensure_future(self.app(scope, exchange.receive, exchange.send))
        watch = asyncio.ensure_future(exchange.client_left())
        try:
            await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done() and exchange.left.is_set():  # the client left before its answer
                await _cancelled(task)
                return
            watch.cancel()
            await task
        except (ClientDisconnect, ServerStopping, asyncio.CancelledError) as e:
            # ClientDisconnect: the client left while sending its body; ServerStopping: the server stops before
            # the body came; CancelledError: uvicorn's drain ran out while the request waited for its answer
            watch.cancel()
            await _cancelled(task)
            if not isinstance(e, ClientDisconnect) and not exchange.started:
                response = error_response(503, "server stopping; retry on another server or once it is back",
                                          {"Connection": "close"})
                with contextlib.suppress(OSError):
                    await response(scope, exchange.receive, send)


class Exchange:
    """One request's receive and send as the app sees them: a body that stops coming when the server stops
    (ServerStopping), and what came after the body, which only a disconnect can be, kept for ``client_left``."""

    def __init__(self, receive: Receive, send: Send, stopping: asyncio.Event):
        self._receive = receive
        self._send = send
        self.stopping = stopping
        self.body_read = asyncio.Event()
        self.left = asyncio.Event()
        self.started = False  # the answer's first message went out
        self.complete = False  # the answer went out whole

    async def receive(self) -> Message:
        if self.body_read.is_set():  # the app asks again after the body: only a disconnect can come
            await self.left.wait()
            return {"type": "http.disconnect"}
        message = await _first(self._receive(), self.stopping.wait())
        if message is None:
            raise ServerStopping()
        if message["type"] == "http.request" and not message.get("more_body", False):
            self.body_read.set()
        return message

    async def send(self, message: Message) -> None:
        self.started = True
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete = True
        await self._send(message)

    async def client_left(self) -> bool:
        """Once the body is read, wait for the next message: True when it says the client left before the answer
        was complete (the server's own end of the answer says "disconnect" too)."""
        await self.body_read.wait()
        message = await self._receive()
        gone = message["type"] == "http.disconnect" and not self.complete
        if gone:
            self.left.set()
        return gone


async def _first(wanted: Awaitable[Message], stop: Awaitable[Any]) -> Message | None:
    """``wanted``'s message, or None if ``stop`` finishes first (``wanted`` is then cancelled)."""
    get, halt = asyncio.ensure_future(wanted), asyncio.ensure_future(stop)
    try:
        await asyncio.wait({get, halt}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        halt.cancel()
        if not get.done():
            get.cancel()
    return get.result() if get.done() and not get.cancelled() else None


async def _cancelled(task: asyncio.Future) -> None:
    """Cancel ``task`` and wait until it has ended, whatever it raises."""
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
