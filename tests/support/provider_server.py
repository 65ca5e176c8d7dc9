"""A local stand-in for the OpenAI and Anthropic HTTP APIs, for tests: it plays back recorded
responses in order and keeps every request it was sent. It listens on 127.0.0.1 only.

The official SDK clients talk to it unchanged (``base_url``): Chat Completions at
``POST /v1/chat/completions``, Messages at ``POST /v1/messages``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One recorded response: an HTTP status and a JSON body, sent after ``delay`` seconds.
    A ``bytes`` body is sent as it is, under ``content_type`` (a proxy's HTML page, an SSE
    stream, a cut-off body)."""

    body: Any
    status: int = 200
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


@dataclass
class Request:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: Any


#: Seconds between serve_forever's looks for shutdown (socketserver's default is 0.5).
_POLL_SECONDS = 0.02


class ProviderServer:
    """Serve ``replies`` in order, one per request, whichever API path is asked; a request
    past the last reply gets a 500 naming the fact (a test that asks too much fails loudly).
    ``replies`` may instead be a function of the request's JSON body (a recorded model that
    answers by the conversation so far).

    Use as a context manager; ``openai_url`` and ``anthropic_url`` are the SDKs' base URLs.
    """

    def __init__(self, replies: list[Reply] | Callable[[Any], Reply]) -> None:
        self.responder = replies if callable(replies) else None
        self.replies = [] if callable(replies) else list(replies)
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                data = self.rfile.read(length)
                body = json.loads(data) if data else None
                with server._lock:
                    server.requests.append(Request(self.path, dict(self.headers), body))
                    reply = server.responder(body) if server.responder is not None else \
                        server.replies.pop(0) if server.replies else Reply(
                        {"error": {"message": "the test server has no more recorded "
                                              "replies", "type": "test"}}, 500)
                if reply.delay:
                    time.sleep(reply.delay)
                payload = reply.body if isinstance(reply.body, bytes) else \
                    json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", reply.content_type)
                    self.send_header("content-length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        # (serve_forever's loop looks for shutdown every poll_interval: the default 0.5 s
        # was a wait of up to half a second at the end of every test that used a server)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(_POLL_SECONDS,),
                                       daemon=True)

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ProviderServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# --- recorded responses in each provider's shape ---------------------------------------------


def openai_turn(calls: list[tuple[str, str, str]] = (), content: str | None = None,  # type: ignore[assignment]
                finish: str | None = None, refusal: str | None = None) -> Reply:
    """A Chat Completions response: ``calls`` as (id, name, arguments text)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if refusal is not None:
        message["refusal"] = refusal
    if calls:
        message["tool_calls"] = [{"id": call_id, "type": "function",
                                  "function": {"name": name, "arguments": arguments}}
                                 for call_id, name, arguments in calls]
    return Reply({
        "id": "chatcmpl-test", "object": "chat.completion", "created": 1764590000,
        "model": "recorded", "choices": [{
            "index": 0, "message": message,
            "finish_reason": finish or ("tool_calls" if calls else "stop")}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})


def anthropic_turn(blocks: list[dict[str, Any]], stop_reason: str | None = None) -> Reply:
    """A Messages response with these content blocks."""
    uses = any(block.get("type") == "tool_use" for block in blocks)
    return Reply({
        "id": "msg_test", "type": "message", "role": "assistant", "model": "recorded",
        "content": blocks, "stop_reason": stop_reason or ("tool_use" if uses else "end_turn"),
        "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 10}})


def tool_use(use_id: str, name: str, input: Any) -> dict[str, Any]:
    """An Anthropic ``tool_use`` block (``input`` as the API would send it, even malformed)."""
    return {"type": "tool_use", "id": use_id, "name": name, "input": input}


def error_reply(status: int, message: str) -> Reply:
    """An API error in the shape both providers use."""
    return Reply({"type": "error", "error": {"type": "test_error", "message": message}}, status)


def raw_reply(body: bytes, content_type: str = "application/json", status: int = 200) -> Reply:
    """A response whose body is these bytes as they are (not JSON, or not the API's shape)."""
    return Reply(body, status, content_type=content_type)


#: Bodies a provider (or a proxy in front of it) has answered 200 with that are not a turn:
#: (id, the reply). Each must end a loop as ``provider-error``, never a traceback.
MALFORMED = [
    ("html-page", raw_reply(b"<html>proxy</html>", "text/html")),
    ("html-as-json", raw_reply(b"<html>proxy</html>")),
    ("cut-off-json", raw_reply(b'{"choices": [{"message": ')),
    ("sse-stream", raw_reply(b'data: {"choices": []}\n\ndata: [DONE]\n\n', "text/event-stream")),
    ("empty-object", Reply({})),
    ("json-array", Reply([1, 2])),
    ("json-string", Reply("hello")),
    ("error-object", Reply({"type": "error", "error": {"type": "overloaded_error",
                                                       "message": "upstream overloaded"}})),
    ("choices-not-a-list", Reply({"choices": "none", "content": "none"})),
    ("choice-without-message", Reply({"choices": [{"index": 0, "finish_reason": "stop"}],
                                      "content": [{"text": "no type"}]})),
    ("message-not-an-object", Reply({"choices": [{"index": 0, "message": "hi"}],
                                     "content": ["hi"]})),
    ("content-not-a-list", Reply({"choices": [None], "content": 5, "stop_reason": 7})),
]
