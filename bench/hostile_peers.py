#!/usr/bin/env python3
"""Hostile peers for bench/hostile_peers.sh, each on 127.0.0.1.

  target MODE PORTFILE              a transfer target (the sending side of POST /v1/transfers talks to it):
                                    POST /v1/chunks/missing answers every asked digest missing, so the sender
                                    uploads; then each PUT /v1/chunks/ (and every other request) is answered by MODE:
                                      present-no  201 {"present": "no"} (a string where a boolean belongs)
                                      error-body  400 with a 512 MiB body
                                      trickle     200, a body announced as 1 MB that comes one byte a second
  registry PORTFILE CHUNK_BYTES N   a registry stand-in: GET /v2/<repo>/manifests/<tag>.gpuckpt-chunks answers an
                                    artifact manifest of N raw chunks of CHUNK_BYTES each (with its
                                    Docker-Content-Digest), GET /v2/<repo>/blobs/<digest> the chunk files
  flood URL TOKEN MODE N BYTES P    a client flooding PUT /v1/chunks/<digest> with N valid chunks of BYTES raw
                                    bytes, P at once; prints one JSON line: the answers' codes, where the first
                                    507 came, what the answers said they stored
                                      fresh  every chunk new
                                      pair   every chunk sent twice at once: a first upload that announces the
                                             whole body and breaks off after half of it, and while it hangs, a
                                             second, whole one (the first one's failure must not uncount what the
                                             second one stored)

A chunk is sent in its version-1 wire form (docs/formats.md "Chunk store"): "GPUCKCHK", u32 version 1, u8 encoding
0 (raw), 3 zero bytes, u32 raw size, u32 stored size, u64 XXH3-64 of those 24 bytes (libxxhash), then the raw bytes.
"""
import ctypes
import hashlib
import http.client
import http.server
import json
import os
import select
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

_xxhash = ctypes.CDLL("libxxhash.so.0")
_xxhash.XXH3_64bits.restype = ctypes.c_uint64
_xxhash.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def chunk_header(raw_size):
    head = b"GPUCKCHK" + struct.pack("<IB3xII", 1, 0, raw_size, raw_size)
    return head + struct.pack("<Q", _xxhash.XXH3_64bits(head, len(head)))


def random_chunk(raw_size):
    """(chunk digest hex, the chunk file's bytes) of a fresh random raw chunk."""
    raw = os.urandom(raw_size)
    return hashlib.sha256(raw).hexdigest(), chunk_header(raw_size) + raw


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(handler, portfile):
    server = Server(("127.0.0.1", 0), handler)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(portfile + ".tmp", portfile)
    server.serve_forever()


def run_target(mode, portfile):
    class Target(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def body(self):
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def json_answer(self, code, obj):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def hostile(self):
            self.body()
            try:
                if mode == "present-no":
                    self.json_answer(201, {"digest": self.path.rsplit("/", 1)[-1], "present": "no"})
                elif mode == "error-body":
                    total, block = 512 << 20, b"x" * (1 << 20)
                    self.send_response(400)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(total))
                    self.end_headers()
                    for _ in range(total // len(block)):
                        self.wfile.write(block)
                elif mode == "trickle":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "1000000")
                    self.end_headers()
                    for _ in range(1000000):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(1)
            except OSError:
                pass   # the sender hung up: what it should do
            self.close_connection = True

        def do_POST(self):
            if self.path == "/v1/chunks/missing":
                asked = json.loads(self.body() or b"{}").get("digests", [])
                return self.json_answer(200, {"missing": asked, "present": 0})
            self.hostile()

        do_PUT = do_GET = hostile

    serve(Target, portfile)


def run_registry(portfile, chunk_bytes, count):
    # Chunk i is its index (8 bytes) and zeros: distinct chunks, each a full CHUNK_BYTES that the agent must hold,
    # made as they are served (the server never holds one whole).
    def payload_pieces(i):
        yield struct.pack("<Q", i)
        left, zeros = chunk_bytes - 8, bytes(1 << 20)
        while left > 0:
            n = min(left, len(zeros))
            yield zeros[:n]
            left -= n

    blobs = {}
    layers = []
    for i in range(count):
        raw, whole = hashlib.sha256(), hashlib.sha256(chunk_header(chunk_bytes))
        for piece in payload_pieces(i):
            raw.update(piece)
            whole.update(piece)
        blob = "sha256:" + whole.hexdigest()
        blobs[blob] = i
        layers.append({"mediaType": "application/vnd.gpuckpt.chunk.v1", "digest": blob, "size": 32 + chunk_bytes,
                       "annotations": {"io.gpuckpt.chunk.digest": raw.hexdigest()}})
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.gpuckpt.chunks.v1",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json",
                   "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
                   "size": 2, "data": "e30="},
        "layers": layers,
        "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + "ab" * 32,
                    "size": 1234},
        "annotations": {"io.gpuckpt.chunks.pages": "1"}}).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()

    class Registry(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            path = urllib.parse.urlparse(self.path).path
            if "/manifests/" in path and path.endswith(".gpuckpt-chunks"):
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
                self.send_header("Docker-Content-Digest", manifest_digest)
                self.send_header("Content-Length", str(len(manifest)))
                self.end_headers()
                self.wfile.write(manifest)
                return
            blob = path.rsplit("/", 1)[-1]
            if "/blobs/" not in path or blob not in blobs:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(32 + chunk_bytes))
            self.end_headers()
            try:
                self.wfile.write(chunk_header(chunk_bytes))
                for piece in payload_pieces(blobs[blob]):
                    self.wfile.write(piece)
            except OSError:
                self.close_connection = True

    serve(Registry, portfile)


def put_chunk(url, token, digest, data):
    """The answer's status and body of PUT /v1/chunks/<digest> with `data`; (0, error) when the request broke.
    The body goes in 64 KiB pieces, and an answer that comes before it is all sent (a 507 or 429 is answered
    before the agent reads a body) is read then: the agent closes such a connection without reading the rest."""
    u = urllib.parse.urlparse(url)
    s = socket.create_connection((u.hostname, u.port), timeout=120)
    try:
        s.sendall(("PUT /v1/chunks/%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n"
                   "Connection: close\r\n\r\n" % (digest, u.netloc, token, len(data))).encode())
        view = memoryview(data)
        # The first wait is for the answer a refusal gives on the headers alone: after it, the agent closes, and
        # body bytes still on the way turn the close into a reset that loses the answer.
        for at in range(0, len(data), 1 << 16):
            if select.select([s], [], [], 0.1 if at == 0 else 0)[0]:
                break   # answered early
            s.sendall(view[at:at + (1 << 16)])
        r = http.client.HTTPResponse(s)
        r.begin()
        return r.status, r.read(4096)
    except OSError as e:
        return 0, str(e).encode()
    finally:
        s.close()


def broken_upload(url, token, digest, data, started, release):
    """PUT that announces all of `data` and sends half; `started` is set once the agent is reading it (the half
    sent), and the connection breaks when `release` is set."""
    u = urllib.parse.urlparse(url)
    s = socket.create_connection((u.hostname, u.port), timeout=120)
    try:
        s.sendall(("PUT /v1/chunks/%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n"
                   % (digest, u.netloc, token, len(data))).encode())
        s.sendall(data[:len(data) // 2])
        time.sleep(0.2)   # the agent has read the headers and reserved the chunk by now
        started.set()
        release.wait(60)
    finally:
        s.close()


def run_flood(url, token, mode, n, raw_bytes, parallel):
    lock = threading.Lock()
    results = []   # (index, status, stored bytes or None)
    next_index = [0]
    start = time.monotonic()

    def worker():
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= n:
                return
            digest, data = random_chunk(raw_bytes)
            if mode == "pair":
                started, release = threading.Event(), threading.Event()
                t = threading.Thread(target=broken_upload, args=(url, token, digest, data, started, release))
                t.start()
                started.wait(10)
                status, body = put_chunk(url, token, digest, data)
                release.set()
                t.join()
            else:
                status, body = put_chunk(url, token, digest, data)
            stored = None
            if status in (200, 201):
                try:
                    stored = json.loads(body).get("stored_bytes")
                except ValueError:
                    pass
            with lock:
                results.append((i, status, stored, time.monotonic() - start,
                                body.decode(errors="replace") if status not in (200, 201) else ""))

    threads = [threading.Thread(target=worker) for _ in range(parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.sort()
    codes = {}
    for r in results:
        codes[str(r[1])] = codes.get(str(r[1]), 0) + 1
    refused = [r for r in results if r[1] == 507]
    taken = [r for r in results if r[1] == 201]
    print(json.dumps({
        "mode": mode, "sent": n, "raw_bytes": raw_bytes, "parallel": parallel, "codes": codes,
        "taken": len(taken), "taken_file_bytes": len(taken) * (32 + raw_bytes),
        "first_507_at": refused[0][0] if refused else None,
        "taken_before_first_507": len([r for r in taken if not refused or r[0] < refused[0][0]]),
        "seconds": round(time.monotonic() - start, 2),
        "first_507_message": refused[0][4] if refused else "",
        "other_message": next((r[4] for r in results if r[1] not in (200, 201, 507)), ""),
    }))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    verb, args = sys.argv[1], sys.argv[2:]
    if verb == "target" and len(args) == 2:
        run_target(args[0], args[1])
    elif verb == "registry" and len(args) == 3:
        run_registry(args[0], int(args[1]), int(args[2]))
    elif verb == "flood" and len(args) == 6:
        run_flood(args[0], args[1], args[2], int(args[3]), int(args[4]), int(args[5]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
