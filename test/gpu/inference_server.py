"""A small inference server over HTTP/1.1 (keep-alive) for the pod network tests: a Llama-shaped causal LM built
from a config with seeded random weights (transformers, float32, deterministic kernels), decoding one greedy token
stream whose KV cache lives on the GPU between requests. So an answer after a checkpoint/restore equals the
uninterrupted run's only if the weights AND the decoding state came back bit for bit.
    GET /next?n=K     the next K tokens of the stream: {"step": tokens so far, "tokens": [...]}
    GET /health       {"ok": true, "model": "llama"|"cpu-hash", "device": ...}
--model cpu-hash is the same service with a SHA-256 chain as the "model", for machines without torch (the CPU
checks of the network and CRIU path only).
    python3 inference_server.py [--port 8080] [--model llama|cpu-hash] [--ready FILE]"""
import argparse
import hashlib
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

SEED = 1234
# One stream restarts from its prompt after this many tokens (the model's context), deterministically.
CONTEXT = 1024
PROMPT = [1, 17, 42, 7, 99, 3]


class HashStream:
    """Deterministic token stream without torch: token i is taken from SHA-256 of the chain so far."""

    name = "cpu-hash"
    device = "cpu"

    def __init__(self) -> None:
        self.state = hashlib.sha256(f"{SEED}:{PROMPT}".encode()).digest()

    def next_tokens(self, n: int) -> list:
        out = []
        for _ in range(n):
            self.state = hashlib.sha256(self.state).digest()
            out.append(int.from_bytes(self.state[:4], "little") % 512)
        return out


class LlamaStream:
    """Greedy decoding of a randomly initialised Llama-shaped model, KV cache kept on the GPU between requests."""

    name = "llama"

    def __init__(self) -> None:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        self.torch = torch
        torch.manual_seed(SEED)
        torch.use_deterministic_algorithms(True)
        config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                             num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=CONTEXT + 8)
        self.model = LlamaForCausalLM(config).to("cuda").eval()
        self.device = torch.cuda.get_device_name(0)
        self.reset()

    def reset(self) -> None:
        self.cache = None
        self.pending = self.torch.tensor([PROMPT], device="cuda")
        self.length = 0

    def next_tokens(self, n: int) -> list:
        out = []
        with self.torch.no_grad():
            for _ in range(n):
                if self.length + self.pending.shape[1] > CONTEXT:
                    self.reset()
                r = self.model(input_ids=self.pending, past_key_values=self.cache, use_cache=True)
                self.cache = r.past_key_values
                self.length += self.pending.shape[1]
                token = r.logits[:, -1, :].argmax(dim=-1, keepdim=True)
                self.pending = token
                out.append(int(token.item()))
        return out


def serve(a: argparse.Namespace) -> None:
    stream = LlamaStream() if a.model == "llama" else HashStream()
    state = {"step": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"   # keep-alive: one client connection carries many requests

        def log_message(self, *args) -> None:
            pass

        def reply(self, code: int, body: dict) -> None:
            data = (json.dumps(body) + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path == "/health":
                self.reply(200, {"ok": True, "model": stream.name, "device": stream.device, "pid": os.getpid()})
            elif url.path == "/next":
                n = int(parse_qs(url.query).get("n", ["8"])[0])
                if not 0 < n <= 256:
                    self.reply(400, {"error": f"n={n}: ask for 1 to 256 tokens"})
                    return
                tokens = stream.next_tokens(n)
                state["step"] += n
                self.reply(200, {"step": state["step"], "tokens": tokens})
            else:
                self.reply(404, {"error": f"no {url.path}: GET /next?n=K or /health"})

    # One request at a time: the stream is one sequence (the threads only keep idle connections from blocking).
    class Server(ThreadingHTTPServer):
        daemon_threads = True

    import threading
    lock = threading.Lock()
    handle = Handler.do_GET

    def locked(self) -> None:
        with lock:
            handle(self)

    Handler.do_GET = locked
    server = Server(("0.0.0.0", a.port), Handler)
    if a.ready:
        with open(a.ready + ".tmp", "w") as f:
            f.write(f"{server.server_address[1]}\n")
        os.replace(a.ready + ".tmp", a.ready)
    print(f"serving {stream.name} on {stream.device}, port {server.server_address[1]}", flush=True)
    server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--model", choices=["llama", "cpu-hash"], default="llama")
    p.add_argument("--ready", help="write the port here once listening")
    serve(p.parse_args())


if __name__ == "__main__":
    main()
