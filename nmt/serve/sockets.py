"""The server's listening sockets, and how ``--workers`` processes share its one port.

With one listening socket shared by N processes, the kernel hands each new connection to whichever process
accepts first, and a kept-alive connection stays with that process for good. Measured with 32 kept-alive
clients and two workers (benchmarks/serve_load.py): the connections split 31/1, 27/5 and 17/15 in three
levels, and the level with 31 on one worker served 16% fewer sentences than the even one. On Linux each worker
therefore listens on a socket of its own bound to the same port with ``SO_REUSEPORT``, and the kernel spreads
new connections over those sockets by a hash of their addresses. A worker opens its socket only once its model
is loaded, and its socket closes with it, so connections never wait for a worker that is starting or gone.

SO_REUSEPORT would also let a second server bind the port and take half its connections, so a port already
served is refused in every mode: the parent first binds the port without the option, which fails against any
socket listening there or holding it; the socket it then keeps for the life of the server is bound with
SO_REUSEPORT but without SO_REUSEADDR, against which another server's check fails even before our workers
listen."""

from __future__ import annotations

import errno
import socket
import sys
from dataclasses import dataclass

from nmt.errors import UsageError

BACKLOG = 2048


def listening_socket(host: str, port: int, *, reuse_port: bool = False, listen: bool = True,
                     reuse_address: bool = True) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (port 0: a free one), listening unless ``listen`` is false; with
    ``reuse_port``, others with the option can bind the same port; ``reuse_address``: the connections an earlier
    server left in TIME_WAIT do not block the port. A busy or foreign address is one line."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise UsageError(f"--host {host}: not an address of this machine; use 127.0.0.1 or 0.0.0.0") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    if reuse_address:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    # accepted connections inherit it: an answer's headers and body leave at once instead of the body waiting
    # for the client's delayed ACK (40 ms per request on a kept-alive connection)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise UsageError(f"--port {port}: already in use on {host}; stop the other server or pick another "
                             "port (--port 0 picks a free one)") from None
        raise UsageError(f"--host {host} --port {port}: cannot listen there ({e.strerror})") from None
    if listen:
        sock.listen(BACKLOG)
    return sock


def kernel_balances_ports() -> bool:
    """Whether sockets bound to one port with SO_REUSEPORT share its new connections out (Linux; BSD's and
    macOS's SO_REUSEPORT does not balance)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


@dataclass
class WorkerPort:
    """How a worker process listens: on a socket of its own bound to ``host``:``port`` with SO_REUSEPORT, or,
    where the kernel does not balance that (``shared`` given), on the parent's one listening socket."""

    host: str
    port: int
    shared: socket.socket | None = None

    def listen(self) -> socket.socket:
        if self.shared is not None:
            return self.shared
        return listening_socket(self.host, self.port, reuse_port=True)


def worker_port(host: str, port: int) -> tuple[socket.socket, WorkerPort]:
    """(the parent's socket, how its workers listen). Where the kernel balances, the parent's socket is bound
    with SO_REUSEPORT but never listens: it holds the port (``--port 0`` picks it) while workers come and go."""
    if not kernel_balances_ports():
        sock = listening_socket(host, port)
        return sock, WorkerPort(host, sock.getsockname()[1], shared=sock)
    sock = holding_socket(host, port)
    return sock, WorkerPort(host, sock.getsockname()[1])


def holding_socket(host: str, port: int) -> socket.socket:
    """The parent's socket holding ``host``:``port`` for its SO_REUSEPORT workers, once the port is known to be
    free: a probe bound without SO_REUSEPORT fails against any server there (UsageError naming --port)."""
    probe = listening_socket(host, port, listen=False)
    port = probe.getsockname()[1]
    probe.close()
    try:
        return listening_socket(host, port, reuse_port=True, listen=False, reuse_address=False)
    except UsageError:
        # only connections in TIME_WAIT that a server without SO_REUSEPORT left (the probe passed): hold the
        # port as the workers bind it; a server already serving is refused by the probe all the same
        return listening_socket(host, port, reuse_port=True, listen=False)
