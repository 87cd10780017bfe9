#!/usr/bin/env python3
"""A TCP proxy for the transfer tests: forwards 127.0.0.1:PORT (written to PORT_FILE) to TARGET_PORT and, once,
breaks the client-to-server stream at byte AT of all connections together (the sender opens one connection per
request, one after the other): `drop` closes both ends there (a dropped stream), `flip` changes that one byte and
goes on (a corrupted byte). `pass` forwards everything.
Usage: flaky_proxy.py MODE AT TARGET_PORT PORT_FILE"""
import os
import socket
import sys
import threading

mode, at, target_port, port_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
lock = threading.Lock()
total = [0]       # client-to-server bytes of every connection so far
done = [mode == "pass"]


def pump(src, dst, upstream):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if upstream:
                with lock:
                    seen = total[0]
                    total[0] += len(data)
                    act = not done[0] and seen <= at < seen + len(data)
                    if act:
                        done[0] = True
                if act:
                    cut = at - seen
                    if mode == "drop":
                        dst.sendall(data[:cut])
                        break
                    data = data[:cut] + bytes([data[cut] ^ 0x01]) + data[cut + 1:]
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(client):
    server = socket.create_connection(("127.0.0.1", target_port))
    threading.Thread(target=pump, args=(server, client, False), daemon=True).start()
    pump(client, server, True)


listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(16)
with open(port_file + ".tmp", "w") as f:
    f.write(str(listener.getsockname()[1]))
os.rename(port_file + ".tmp", port_file)
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
