"""A bearer-token guard on every route of a vLLM server that listens on TCP (``vllm.host``).

vLLM's own ``VLLM_API_KEY`` check guards only its ``/v1``-style routes, which leaves
``/collective_rpc`` and the weight-update routes open to anyone who reaches the port.
The sidecar (``vllm_sidecar``) loads this class with ``--middleware
graft_jax_token_guard.TokenGuard`` from this folder, which it alone puts on the server's
``PYTHONPATH``: standard library only, since the vLLM venv has no graft_jax.
"""

import hashlib
import hmac
import os

_BODY = b'{"error": "Unauthorized"}'


class TokenGuard:
  """Pure ASGI middleware: a request without ``Authorization: Bearer $VLLM_API_KEY`` gets
  HTTP 401 (a WebSocket is closed), whatever its route or method."""

  def __init__(self, app):
    token = os.environ.get("VLLM_API_KEY", "")
    if not token:
      raise RuntimeError("graft_jax_token_guard: VLLM_API_KEY is empty; a TCP server needs a token")
    self.app = app
    self._want = hashlib.sha256(f"Bearer {token}".encode()).digest()

  def _allowed(self, scope) -> bool:
    given = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
    return hmac.compare_digest(hashlib.sha256(given).digest(), self._want)

  async def __call__(self, scope, receive, send):
    if scope["type"] not in ("http", "websocket") or self._allowed(scope):
      await self.app(scope, receive, send)
    elif scope["type"] == "websocket":
      await send({"type": "websocket.close", "code": 1008})
    else:
      await send({"type": "http.response.start", "status": 401, "headers": [
          (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
          (b"content-length", str(len(_BODY)).encode())]})
      await send({"type": "http.response.body", "body": _BODY})
