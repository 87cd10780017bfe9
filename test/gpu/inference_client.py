"""Client of inference_server.py for the pod network tests. Each answer is one line "STEP TOKENS" appended to OUT,
so a run interrupted by a checkpoint/restore can be compared line by line with an uninterrupted one.
    run   HOST:PORT OUT --requests N [--n K]      N requests over one new connection
    hold  HOST:PORT OUT --requests N --ready R --go G --result RES [--n K]
          N requests over one connection, then writes R and waits (connection open) until G exists; then one more
          request over the SAME connection: RES gets "answered", or what happened to the connection ("reset
          ECONNRESET", "closed", "timeout", ...) — the open connection's fate across a checkpoint."""
import argparse
import errno
import http.client
import json
import os
import socket
import sys
import time


def ask(conn: http.client.HTTPConnection, n: int) -> str:
    conn.request("GET", f"/next?n={n}")
    r = conn.getresponse()
    body = json.loads(r.read())
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {body}")
    return f"{body['step']} {','.join(map(str, body['tokens']))}"


def append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


def connect(target: str, timeout: float) -> http.client.HTTPConnection:
    host, port = target.rsplit(":", 1)
    deadline = time.time() + timeout
    while True:   # the server may still be loading its model
        try:
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.connect()
            return conn
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def fate(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout):
        return "timeout"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "closed (EOF before an answer)"
    if isinstance(exc, OSError) and exc.errno:
        return f"reset {errno.errorcode.get(exc.errno, exc.errno)}"
    return f"failed {type(exc).__name__}: {exc}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["run", "hold"])
    p.add_argument("target")
    p.add_argument("out")
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--ready")
    p.add_argument("--go")
    p.add_argument("--result")
    p.add_argument("--connect-timeout", type=float, default=300)
    a = p.parse_args()
    conn = connect(a.target, a.connect_timeout)
    for _ in range(a.requests):
        append(a.out, ask(conn, a.n))
    if a.mode == "run":
        return
    if not (a.ready and a.go and a.result):
        sys.exit("hold needs --ready, --go and --result")
    local = conn.sock.getsockname()
    with open(a.ready, "w") as f:
        f.write(f"{local[0]}:{local[1]}\n")
    while not os.path.exists(a.go):
        time.sleep(0.05)
    try:
        append(a.out, ask(conn, a.n))
        outcome = "answered"
    except (OSError, http.client.HTTPException) as e:
        outcome = fate(e)
    with open(a.result, "w") as f:
        f.write(outcome + "\n")


if __name__ == "__main__":
    main()
