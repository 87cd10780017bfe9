#!/usr/bin/env python3
"""A hostile hop between two gpuckpt agents, for test/k8s/migrate_hostile.sh.

Agents push archives to each other over plain HTTP (node/archive_transfer.h: PUT /v1/incoming/NAME, then a commit
with the whole archive's SHA-256). The test routes the source agent's connections to the target agent's pod IP
through this proxy (an iptables DNAT rule on the machine both pod networks hang off) and the proxy, by MODE:

  flip   flips one byte in the middle of the body of every PUT /v1/incoming/...: what a faulty NIC, switch or
         middlebox does to an unauthenticated stream; the target must refuse the archive at its commit;
  slow   forwards those bodies at RATE bytes a second, so that a test can act (delete the target's agent pod)
         while an archive is on its way.

Everything else (headers, other requests, the answers) passes through unchanged. One line per event goes to LOG:
"request METHOD PATH", "flipped NAME body byte OFFSET", "slow NAME started", "upstream-failed ..."; the test reads
these to know that the hop acted.

Usage: transfer_hop.py MODE LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT LOG [RATE]
"""
import socket
import sys
import threading
import time

MODE, LISTEN_PORT, UPSTREAM_HOST, UPSTREAM_PORT, LOG = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
RATE = int(sys.argv[6]) if len(sys.argv) > 6 else 32768
if MODE not in ("flip", "slow"):
    sys.exit("transfer_hop.py: MODE must be flip or slow, got " + MODE)
log_lock = threading.Lock()


def log(line):
    with log_lock, open(LOG, "a") as f:
        f.write(line + "\n")


def close_both(*sockets):
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def pump_back(upstream, client):
    """The agent's answers, unchanged."""
    try:
        while True:
            data = upstream.recv(65536)
            if not data:
                break
            client.sendall(data)
    except OSError:
        pass
    finally:
        close_both(client, upstream)


class Reader:
    """Buffered reads from the client's socket."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data

    def headers(self):
        while b"\r\n\r\n" not in self.buf:
            self.fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        return head + b"\r\n\r\n"

    def some(self, limit):
        if not self.buf:
            self.fill()
        out, self.buf = self.buf[:limit], self.buf[limit:]
        return out


def forward_requests(client, upstream):
    reader = Reader(client)
    try:
        while True:
            head = reader.headers()
            lines = head.decode("latin-1").split("\r\n")
            method, path = (lines[0].split(" ") + ["", ""])[:2]
            fields = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
            log(f"request {method} {path}")
            upstream.sendall(head)
            if "chunked" in fields.get("transfer-encoding", ""):
                log("unparsed chunked body: passing the rest through")
                upstream.sendall(reader.buf)
                while True:
                    data = client.recv(65536)
                    if not data:
                        return
                    upstream.sendall(data)
            length = int(fields.get("content-length", "0"))
            hostile = method == "PUT" and path.startswith("/v1/incoming/")
            name = path.split("?")[0].rsplit("/", 1)[-1]
            flip_at = length // 2 if hostile and MODE == "flip" else -1
            done, t0 = 0, time.monotonic()
            if hostile and MODE == "slow":
                log(f"slow {name} started ({length} bytes at {RATE} B/s)")
            while done < length:
                part = bytearray(reader.some(min(length - done, 4096 if MODE == "slow" else 65536)))
                if done <= flip_at < done + len(part):
                    part[flip_at - done] ^= 0x01
                    log(f"flipped {name} body byte {flip_at}")
                upstream.sendall(part)
                done += len(part)
                if hostile and MODE == "slow":
                    ahead = done / RATE - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
    except (EOFError, OSError):
        pass
    finally:
        close_both(client, upstream)


def serve(client):
    try:
        upstream = socket.create_connection((UPSTREAM_HOST, UPSTREAM_PORT), timeout=3)
        upstream.settimeout(None)
    except OSError as e:
        log(f"upstream-failed {UPSTREAM_HOST}:{UPSTREAM_PORT}: {e}")
        client.close()
        return
    threading.Thread(target=pump_back, args=(upstream, client), daemon=True).start()
    forward_requests(client, upstream)


def main():
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", LISTEN_PORT))
    listener.listen(16)
    log(f"listening {LISTEN_PORT} -> {UPSTREAM_HOST}:{UPSTREAM_PORT} mode {MODE}")
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client,), daemon=True).start()


if __name__ == "__main__":
    main()
