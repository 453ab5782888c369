"""One HTTP request to a vLLM server, over its private Unix socket or over TCP.

The standard library's ``http.client`` speaks HTTP over any connected socket; the
connection below opens a Unix one, so the server needs no TCP port (``vllm_sidecar``).
"""

from __future__ import annotations

import http.client
import socket

# What a failed connection or a broken response raises (reset, refused, timeout).
ERRORS = (OSError, http.client.HTTPException)


class UnixConnection(http.client.HTTPConnection):
  """HTTP over the Unix socket at ``path``."""

  def __init__(self, path: str, timeout: float):
    super().__init__("localhost", timeout=timeout)
    self.path = path

  def connect(self) -> None:
    self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    self.sock.settimeout(self.timeout)
    self.sock.connect(self.path)


def request(method: str, path: str, body: bytes | None, *, timeout: float,
            socket_path: str | None = None, host: str = "", port: int = 0,
            token: str = "") -> tuple[int, bytes]:
  """(status, body) of one JSON request to the server at ``socket_path``, else at
  ``host:port``; ``token``: the bearer token every route of a TCP server asks for."""
  conn = (UnixConnection(socket_path, timeout) if socket_path
          else http.client.HTTPConnection(host, port, timeout=timeout))
  headers = {"Content-Type": "application/json"}
  if token:
    headers["Authorization"] = f"Bearer {token}"
  try:
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    return r.status, r.read()
  finally:
    conn.close()
