"""Token counts from the model server itself, where it has an endpoint for them:
llama-cpp-python's ``/extras/tokenize/count``, and ``/tokenize`` of llama.cpp's own server
(``{"content"}`` -> ``{"tokens"}``), vLLM (``{"prompt"}`` -> ``{"count"}``) and TGI
(``{"inputs"}`` -> a list). Probed once; a server with none of them is remembered as such.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .http import _opener_for

#: Endpoints tried in order, relative to the server's root (the base URL without ``/v1``).
ENDPOINTS = ("/extras/tokenize/count", "/tokenize")
#: Hosted APIs have no such endpoint: nothing is sent there.
HOSTED = frozenset({"api.openai.com", "api.anthropic.com"})
#: Longest wait for a count. llama-cpp-python answers a tokenize request only between
#: generations: a server busy with another client's reply is counted another way.
MAX_WAIT_S = 5.0


def server_root(base_url: str) -> str:
    """``http://host:8080/v1`` -> ``http://host:8080`` (tokenize endpoints sit at the root)."""
    parts = urlsplit(base_url.strip().rstrip("/"))
    path = parts.path.removesuffix("/chat/completions").rstrip("/").removesuffix("/v1")
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class ServerTokenizer:
    """Counts text in the server's own tokenizer. ``count`` returns None when the server has no
    tokenize endpoint, or did not answer in time: from then on it is not asked again, and the
    caller counts another way."""

    def __init__(
        self,
        base_url: str,
        model: str,
        headers: dict[str, str] | None = None,
        *,
        timeout: float = MAX_WAIT_S,
    ) -> None:
        self.root = server_root(base_url)
        self.model = model
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.timeout = min(timeout, MAX_WAIT_S)
        #: The endpoint that answered (a path), '' when none did, None before the probe.
        self.endpoint: str | None = (
            "" if (urlsplit(self.root).hostname or "").lower() in HOSTED else None
        )

    @property
    def url(self) -> str:
        return f"{self.root}{self.endpoint}" if self.endpoint else ""

    def count(self, text: str) -> int | None:
        if not text:
            return 0
        if self.endpoint is None:
            self.endpoint = ""
            for path in ENDPOINTS:
                n, answered = self._ask(path, text)
                if n is not None:
                    self.endpoint = path
                    return n
                if not answered:  # silent or gone: no use trying the next path
                    return None
            return None
        if not self.endpoint:
            return None
        n, _ = self._ask(self.endpoint, text)
        if n is None:
            self.endpoint = ""  # it stopped counting: not asked again
        return n

    def _ask(self, path: str, text: str) -> tuple[int | None, bool]:
        """The count and whether the server answered at all (a 404 is an answer)."""
        if path == "/extras/tokenize/count":
            payload: dict[str, Any] = {"input": text}
        else:  # one body that llama.cpp, vLLM and TGI each read their own field of
            payload = {
                "model": self.model,
                "prompt": text,
                "content": text,
                "inputs": text,
                "add_special_tokens": False,
                "add_special": False,
            }
        url = f"{self.root}{path}"
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        request = urllib.request.Request(url, data=data, headers=self.headers, method="POST")
        try:
            with _opener_for(url, self.timeout).open(request, timeout=self.timeout) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # no such endpoint (404, 405, 422 ...)
            exc.close()
            return None, True
        except (urllib.error.URLError, http.client.HTTPException, OSError):
            return None, False  # not answering in time, or gone
        except ValueError:  # not JSON: some other page
            return None, True
        return _count_of(body, text), True


def _count_of(body: Any, text: str) -> int | None:
    n: Any = None
    if isinstance(body, dict):
        n = body.get("count")
        if n is None and isinstance(body.get("tokens"), list):
            n = len(body["tokens"])
    elif isinstance(body, list):  # TGI: one object per token
        n = len(body)
    # A count that cannot be one (a different API answering on the path) is no count.
    if not isinstance(n, int) or isinstance(n, bool) or n < 0 or n > len(text) + 8:
        return None
    return n
