"""A TCP forwarder to a real service that a test can shut and open again on the same port: a service that
stops answering mid-stream, as a client sees it (connections refused, the open ones cut), while the service
itself keeps its state. Used where restarting the service would lose what it holds (Apicurio's in-memory
registry forgets every schema when it stops)."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpGate:
    """Listens on ``127.0.0.1:<port>`` (a free one) and forwards each connection to ``target`` (host, port).
    ``shut()`` closes the listener and every forwarded connection (new ones are refused, as by a stopped
    service); ``open()`` listens on the same port again. ``url(scheme)`` names it for a client."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener: socket.socket | None = None
        self._live: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.port = 0

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}"

    def open(self) -> TcpGate:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(32)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def shut(self) -> None:
        """Refuse new connections and cut the forwarded ones (both directions)."""
        with self._lock:
            listener, self._listener = self._listener, None
            live, self._live = self._live, set()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # shut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._live.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=relay, args=(a, b), daemon=True).start()


def relay(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source``'s bytes to ``sink`` until ``source`` ends or either breaks, then end ``sink``'s
    writing side (a half-close, so the other direction finishes on its own)."""
    source.settimeout(None)
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
