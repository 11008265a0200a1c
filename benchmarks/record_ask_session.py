"""Record one real two-question `repoctx ask --session` exchange with a local llama.cpp-style
server, and measure how much of the follow-up's prompt the server reused.

The real CLI asks two questions about a small shop package in one session, through a recording
proxy on 127.0.0.1 in front of the server; every chat request is kept whole (the follow-up must
start with the first request byte for byte, and the test compares them) with the server's
answer as it came. The proxy asks the server unstreamed (``--upstream-stream`` to stream):
llama-cpp-python ends a stream with a bare ``[DONE]`` as soon as another client's request
waits (``interrupt_requests``, on by default), which on a shared server cuts answers to
nothing; the CLI takes the JSON answer to its streamed request as it is. A reply cut anyway,
or another client's request run between the two questions (the server's cache then holds
theirs), writes nothing (exit 2 or 4); ``--wait-idle`` waits for a quiet server first. The server's log (llama-cpp-python, verbose) prints
``Llama.generate: N prefix-match hit, remaining M prompt tokens to eval`` per request: N is
what it reused of the prompt, M what it processed. The line whose N + M matches each request's
prompt is stored with the recording, and the follow-up's processed share M / (N + M).

Writes tests/recordings/<label>-ask-session.json (replayed by tests/test_ask_session.py);
prints one JSON object (the figures) to stdout, progress to stderr.

    .venv/bin/python benchmarks/record_ask_session.py --base-url http://127.0.0.1:8087/v1 \\
        --log ~/.cache/repoctx-llm/server-8087.log
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _common import REPO, log
from click.testing import CliRunner

from cli.main import cli
from cli.settings import load_config
from indexer.build import build

FORMAT = 1
SERVER = "llama-cpp-python 0.3.36 server, default (GGUF Jinja) chat format, n_ctx 8192"
#: Small enough that a question takes ~20 s on 2 cores: the shared server's other clients
#: have less time to come between the two questions.
BUDGET = 900
MAX_TOKENS = 200
QUESTIONS = [
    "How is a coupon code applied to the order total?",
    "How is the shipping cost of an order computed?",
]
_HIT = re.compile(rb"(\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")

#: A small shop package: enough code that one context does not hold it all.
FILES = {
    "shop/__init__.py": '"""A toy shop."""\n',
    "shop/discount.py": '''
        """Discount codes and what they take off."""

        CODES = {"SAVE10": 10, "HALF": 50, "STAFF": 30}


        class UnknownCode(ValueError):
            """A coupon code that is not in CODES."""


        def discount_percent(code: str) -> int:
            """Percent off for a code (case-insensitive); UnknownCode for an unknown one."""
            try:
                return CODES[code.strip().upper()]
            except KeyError:
                raise UnknownCode(code) from None


        def apply_discount(amount: float, code: str | None) -> float:
            """The amount after the code's discount, rounded to cents; no code, no discount."""
            if not code:
                return amount
            return round(amount * (1 - discount_percent(code) / 100), 2)
        ''',
    "shop/shipping.py": '''
        """Shipping cost by weight and destination."""

        BASE = {"domestic": 4.5, "eu": 9.0, "world": 19.0}
        PER_KG = {"domestic": 0.8, "eu": 1.5, "world": 3.2}
        FREE_ABOVE = 60.0


        def zone_for(country: str) -> str:
            if country == "DE":
                return "domestic"
            if country in {"AT", "FR", "NL", "IT", "ES", "PL"}:
                return "eu"
            return "world"


        def shipping_cost(weight_kg: float, country: str, subtotal: float) -> float:
            """Base fee of the zone plus a rate per started kilogram; free above FREE_ABOVE
            at home."""
            zone = zone_for(country)
            if zone == "domestic" and subtotal >= FREE_ABOVE:
                return 0.0
            kilos = int(weight_kg) + (1 if weight_kg % 1 else 0)
            return round(BASE[zone] + PER_KG[zone] * kilos, 2)
        ''',
    "shop/tax.py": '''
        """VAT per country."""

        RATES = {"DE": 0.19, "AT": 0.20, "FR": 0.20, "NL": 0.21}


        def vat(amount: float, country: str) -> float:
            """VAT owed on an amount; 0 outside the listed countries."""
            return round(amount * RATES.get(country, 0.0), 2)
        ''',
    "shop/inventory.py": '''
        """Stock levels."""


        class OutOfStock(RuntimeError):
            pass


        class Inventory:
            def __init__(self, stock: dict[str, int] | None = None):
                self.stock = dict(stock or {})

            def available(self, sku: str) -> int:
                return self.stock.get(sku, 0)

            def reserve(self, sku: str, qty: int) -> None:
                """Take ``qty`` of ``sku`` out of stock; OutOfStock when there is too little."""
                if self.available(sku) < qty:
                    raise OutOfStock(f"{sku}: {self.available(sku)} left, {qty} wanted")
                self.stock[sku] -= qty
        ''',
    "shop/order.py": '''
        """An order: lines, a coupon, the destination, and what it all costs."""
        from dataclasses import dataclass, field

        from shop.discount import apply_discount
        from shop.shipping import shipping_cost
        from shop.tax import vat


        @dataclass
        class Line:
            sku: str
            price: float
            qty: int = 1
            weight_kg: float = 0.5


        @dataclass
        class Order:
            country: str
            lines: list[Line] = field(default_factory=list)
            coupon: str | None = None

            def add(self, line: Line) -> None:
                self.lines.append(line)

            def apply_coupon(self, code: str) -> None:
                """Remember a coupon code; it is checked when the total is computed."""
                self.coupon = code

            def subtotal(self) -> float:
                return round(sum(line.price * line.qty for line in self.lines), 2)

            def weight(self) -> float:
                return sum(line.weight_kg * line.qty for line in self.lines)

            def total(self) -> float:
                """Discounted subtotal plus VAT plus shipping."""
                net = apply_discount(self.subtotal(), self.coupon)
                return round(net + vat(net, self.country)
                             + shipping_cost(self.weight(), self.country, net), 2)
        ''',
    "tests/test_order.py": """
        from shop.order import Line, Order


        def test_total_with_coupon_at_home():
            order = Order("DE", [Line("mug", 20.0, 2)])
            order.apply_coupon("save10")
            assert order.total() == 47.34


        def test_free_shipping_above_sixty():
            order = Order("DE", [Line("lamp", 70.0)])
            assert order.total() == 83.3
        """,
}


class Upstream:
    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.prefix = parts.path.rstrip("/")

    def open(self, path: str, body: bytes) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=1800)
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        return conn.getresponse()


def make_repo(root: Path) -> Path:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "PATH": "/usr/bin:/bin",
    }
    root.mkdir(parents=True)
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip("\n"))
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)
    return root


def wait_idle(path: Path, seconds: float, max_wait: float) -> bool:
    """Wait until ``path`` (the server's log) has not grown for ``seconds``; False after
    ``max_wait`` seconds."""
    last, still_since = -1, time.monotonic()
    give_up = still_since + max_wait
    while True:
        size = path.stat().st_size if path.exists() else 0
        if size != last:
            last, still_since = size, time.monotonic()
        elif time.monotonic() - still_since >= seconds:
            return True
        if time.monotonic() > give_up:
            return False
        time.sleep(2)


def finished(reply: dict[str, Any]) -> bool:
    """Whether a reply ended with a finish reason (llama-cpp-python cuts a stream with a bare
    [DONE] when another client's request waits: `interrupt_requests`)."""
    if "body" in reply:
        choices = reply["body"].get("choices") or [{}]
        return bool(choices[0].get("finish_reason"))
    for event in reply["events"]:
        data = event.partition("data: ")[2]
        if data.startswith("{") and '"finish_reason": "' in data:
            return True
    return False


def back_to_back(
    upstream: Upstream, log_path: Path, exchanges: list[dict[str, Any]], outs: list[dict]
) -> dict[str, Any] | None:
    """Send the two recorded chat requests again (unstreamed), the second right after the
    first, so it waits in line right behind it and runs next. The follow-up's prefix-match
    line, or None when another request still came between."""
    wants = [o["usage"]["prompt_tokens"] for o in outs]
    bodies = [
        json.dumps(
            {k: v for k, v in e["request"].items() if k not in ("stream", "stream_options")}
        ).encode()
        for e in exchanges
    ]
    path = upstream.prefix + "/chat/completions"
    start = log_path.stat().st_size
    answers: dict[int, str] = {}

    def send(i: int) -> None:
        body = json.loads(upstream.open(path, bodies[i]).read())
        answers[i] = body["choices"][0]["message"]["content"]

    def lines() -> list[tuple[int, int]]:
        with open(log_path, "rb") as fh:
            fh.seek(start)
            return [(int(a), int(b)) for a, b in _HIT.findall(fh.read())]

    first = threading.Thread(target=send, args=(0,))
    first.start()
    # The server's lock queues requests in the order they come: the second, sent right after
    # the first, waits behind it and before any later client's.
    time.sleep(0.3)
    second = threading.Thread(target=send, args=(1,))
    second.start()
    first.join()
    second.join()
    seen = lines()
    i = next(n for n, (a, b) in enumerate(seen) if a + b == wants[0])
    if i + 1 >= len(seen) or sum(seen[i + 1]) != wants[1]:
        return None
    return {
        "prefix_hit": seen[i + 1][0],
        "remaining": seen[i + 1][1],
        "same_answer": answers.get(0) == outs[0]["answer"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8087/v1")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="the server's model alias")
    ap.add_argument("--log", type=Path, default=Path.home() / ".cache/repoctx-llm/server-8087.log")
    ap.add_argument("--label", default=None, help="file name stem (default: the model)")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "recordings")
    ap.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="S",
        help="first wait until the server's log has been still for S seconds (a shared server "
        "runs other clients' requests between the two questions, and its cache then holds "
        "theirs)",
    )
    ap.add_argument(
        "--upstream-stream",
        action="store_true",
        help="stream from the server as the CLI asks (default: unstreamed, which a shared "
        "llama-cpp-python server cannot cut short)",
    )
    ap.add_argument(
        "--back-to-back",
        action="store_true",
        help="measure the reuse on the two requests sent again back to back even when no other "
        "request came between them",
    )
    ap.add_argument(
        "--max-wait",
        type=float,
        default=3600.0,
        metavar="S",
        help="give up waiting after S seconds",
    )
    args = ap.parse_args()
    upstream = Upstream(args.base_url)
    if args.wait_idle and not wait_idle(args.log, args.wait_idle, args.max_wait):
        log(f"the server was never idle for {args.wait_idle} s in {args.max_wait} s")
        return 3
    exchanges: list[dict[str, Any]] = []

    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, format: str, *a: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            chat = self.path.endswith("/chat/completions")
            request = json.loads(body)
            if chat and not args.upstream_stream:
                # llama-cpp-python ends a *stream* as soon as another client's request waits
                # (its `interrupt_requests`, on by default): on a shared server the answer is
                # cut to nothing. Unstreamed, it is answered whole; the CLI takes a JSON
                # answer to its streamed request as it is.
                sent = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
                body = json.dumps(sent).encode()
            t0 = time.monotonic()
            resp = upstream.open(self.path, body)
            self.send_response(resp.status)
            ctype = resp.headers.get("Content-Type", "")
            self.send_header("Content-Type", ctype)
            if not chat or "event-stream" not in ctype:
                data = resp.read()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if chat:
                    reply = {"status": resp.status, "content_type": ctype, "body": json.loads(data)}
                else:
                    return  # the tokenize probe: passed on, not recorded
            else:
                self.end_headers()
                kept = []
                while line := resp.readline():  # forwarded as it comes
                    kept.append(line)
                    self.wfile.write(line)
                    self.wfile.flush()
                raw = b"".join(kept).decode("utf-8").replace("\r\n", "\n")
                events = [e for e in raw.split("\n\n") if e.strip()]
                reply = {"status": resp.status, "content_type": ctype, "events": events}
            seconds = round(time.monotonic() - t0, 1)
            exchanges.append(
                {
                    "request": request,
                    "sent_upstream": "streamed" if args.upstream_stream else "unstreamed",
                    "reply": reply,
                    "seconds": seconds,
                }
            )
            # (CliRunner holds sys.stderr while the CLI runs: progress goes to the real one)
            print(f"  chat request: {seconds} s", file=sys.__stderr__, flush=True)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    proxy_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    outs, windows = [], []
    try:
        with tempfile.TemporaryDirectory(prefix="record-ask-") as tmp:
            root = make_repo(Path(tmp) / "shop")
            build(load_config(root, env={}, jobs=1))
            for q in QUESTIONS:
                start = args.log.stat().st_size if args.log.exists() else 0
                log(f"ask --session: {q}")
                res = CliRunner().invoke(
                    cli,
                    [
                        "ask",
                        q,
                        "-C",
                        str(root),
                        "--model",
                        f"openai:{args.model}",
                        "--session",
                        "rec",
                        "-b",
                        str(BUDGET),
                        "--max-tokens",
                        str(MAX_TOKENS),
                        "--json",
                    ],
                    env={
                        "REPOCTX_MODEL": "",
                        "REPOCTX_MODEL_BASE_URL": proxy_url,
                        "OPENAI_API_KEY": "",
                    },
                )
                if res.exit_code != 0:
                    log(res.output)
                    return 1
                outs.append(json.loads(res.stdout))
                if not finished(exchanges[-1]["reply"]):
                    log(
                        "the server cut the reply (another client's request was waiting): "
                        "nothing written"
                    )
                    return 2
                time.sleep(0.5)  # the server's perf lines follow the stream's end
                with open(args.log, "rb") as fh:
                    fh.seek(start)
                    windows.append(fh.read())
    finally:
        httpd.shutdown()
        httpd.server_close()
    # The server is shared: other clients' requests are in the log too; a request's line is
    # the one whose prefix + remaining is its prompt as counted (nearest).
    hits = []
    for out, window in zip(outs, windows, strict=True):
        want = out["usage"]["prompt_tokens"]
        found = [(int(a), int(b)) for a, b in _HIT.findall(window)]
        hits.append(min(found, key=lambda h: abs(h[0] + h[1] - want)) if found else None)
    between = max(0, len(_HIT.findall(windows[1])) - 1)
    (_, _), (hit, remaining) = hits  # type: ignore[misc]
    method = "the session's own requests"
    if between or args.back_to_back:
        # Another client's request ran between the questions (the shared server's cache then
        # held its prompt). Measure what the server reuses of the follow-up when nothing comes
        # between: the two recorded requests again, the second queued while the first runs.
        log(f"{between} other request(s) ran between the questions: measuring back to back")
        pair = back_to_back(upstream, args.log, exchanges, outs)
        if pair is None:
            log("the two requests could not be run back to back; nothing written")
            return 4
        hit, remaining = pair["prefix_hit"], pair["remaining"]
        method = (
            "the two recorded requests sent again back to back (the follow-up queued while the "
            f"first ran; its answer again the same: {pair['same_answer']})"
        )
    measured = {
        "method": method,
        "first_prompt": outs[0]["prompt_tokens_est"],
        "first_server": {"prefix_hit": hits[0][0], "remaining": hits[0][1]} if hits[0] else None,
        "followup_prompt_counted": outs[1]["prompt_tokens_est"],
        "followup_prefix_hit": hit,
        "followup_remaining": remaining,
        "followup_processed_share": round(remaining / (hit + remaining), 4),
        # other clients' requests the server ran between the two questions of the session
        "requests_between": between,
        "followup_estimated_reused": outs[1]["usage"]["cached_tokens"],
        "prompt_tokens_counted": [o["prompt_tokens_est"] for o in outs],
        "prompt_tokens_server": [
            o["usage"]["prompt_tokens"] if o["usage"]["source"] == "reported" else None
            for o in outs
        ],
        "seconds": [e["seconds"] for e in exchanges],
        "answers": [o["answer"] for o in outs],
        "citations": [[(c["text"], c["valid"]) for c in o["citations"]] for o in outs],
    }
    recording = {
        "format": FORMAT,
        "server": SERVER,
        "model": args.model,
        "recorded": datetime.now(UTC).strftime("%Y-%m-%d"),
        "budget": BUDGET,
        "max_tokens": MAX_TOKENS,
        "questions": QUESTIONS,
        "files": {k: textwrap.dedent(v).lstrip("\n") for k, v in FILES.items()},
        "exchanges": exchanges,
        "measured": measured,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.label or args.model}-ask-session.json"
    path.write_text(json.dumps(recording, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({"written": str(path), **measured}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
