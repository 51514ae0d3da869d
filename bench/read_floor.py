"""The floor of a call's overhead that no gateway code can remove: reading the request's
bytes through uvicorn (uvloop, httptools, as `ctxgate serve` runs it), per body size.

A bare ASGI app under the same server reads the whole body (`gateway.api.asgi.read_body`,
as a managed route does) and answers at once with how long that took, from the app's
call (where the gateway's span starts and `x-ctxgate-overhead-ms` begins) to the last
byte read; the client sends the bodies of the 300-call synthetic session's calls, as
`bench/gateway_growth.py` does.

    python -m bench.read_floor [--repeat 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from typing import Any

import httpx

from gateway.api.asgi import read_body
from gateway.context.replay import calls_from_messages
from tests.harness import free_port
from tests.sessions import synthetic_session


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    started = time.perf_counter()
    body = await read_body(receive, 1 << 30)
    spent = f"{1000 * (time.perf_counter() - started):.3f}".encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"x-read-ms", spent), (b"x-bytes", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=40)
    args = parser.parse_args()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, loop="uvloop",
                                           http="httptools", log_config=None,
                                           access_log=False))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    calls = calls_from_messages(synthetic_session(0, 300)[1], "gpt-4o-mini")
    out = {}
    with httpx.Client(timeout=60) as client:
        for name, body in (("first", calls[0]), ("call 100", calls[100]),
                           ("call 200", calls[200]), ("last", calls[-1])):
            content = json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                                 allow_nan=False).encode()
            ms = []
            for _ in range(args.repeat):
                response = client.post(f"http://127.0.0.1:{port}/", content=content,
                                       headers={"content-type": "application/json"})
                ms.append(float(response.headers["x-read-ms"]))
            out[name] = {"bytes": len(content), "read ms (median)": statistics.median(ms),
                         "read ms (quartiles)": [round(q, 3) for q in
                                                 statistics.quantiles(ms, n=4)]}
    server.should_exit = True
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
