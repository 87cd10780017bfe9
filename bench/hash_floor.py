#!/usr/bin/env python3
"""The hashing floor of a store-backed checkpoint (#21): SHA-256 over 2 MiB chunks, as the CRIU plugin's chunk store
hashes every non-zero chunk of a dump (gpumem/chunk_store.cpp, OpenSSL; hashlib uses OpenSSL too), on 1..T threads.
Prints GiB/s per thread count and the seconds a GIB GiB dump spends hashing at each.
  python3 bench/hash_floor.py [--gib 4] [--threads 1,4,16]"""
import argparse
import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor

CHUNK = 2 << 20


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, default=4)
    p.add_argument("--threads", default="1,4,16")
    args = p.parse_args()
    block = os.urandom(256 << 20)   # 256 MiB of random bytes, hashed chunk by chunk until GIB GiB are done
    views = [memoryview(block)[o:o + CHUNK] for o in range(0, len(block), CHUNK)]
    total = int(args.gib * (1 << 30)) // CHUNK
    print(f"cpus {os.cpu_count()}; {total} chunks of {CHUNK >> 20} MiB ({args.gib} GiB); openssl {hashlib.sha256().name}")
    for threads in (int(t) for t in args.threads.split(",")):
        with ThreadPoolExecutor(threads) as pool:
            start = time.perf_counter()
            list(pool.map(lambda i: hashlib.sha256(views[i % len(views)]).digest(), range(total)))
            took = time.perf_counter() - start
        print(f"threads {threads}: {args.gib / took:.2f} GiB/s, {took:.2f} s for {args.gib} GiB")


if __name__ == "__main__":
    main()
