"""The workload users checkpoint, for bench/restore_vs_restart.sh: a Llama-shaped causal LM of about 1.1B
parameters (TinyLlama's shape) with seeded random weights in bf16 on the GPU (no download), decoding one greedy
token stream whose KV cache stays on the GPU, plus --cpu-mib of CPU heap the process wrote itself (what a real
server holds in tokenizer tables, request buffers and the Python heap), so a checkpoint carries real CPU state.

Each token is appended to --out as "STEP TOKEN UNIX_TIME" and flushed: the bench reads "first token" (cold start)
and "next token after a restore" from that file, and checks that the steps continue without a gap or a restart.
    python3 decode_workload.py --out FILE [--cpu-mib 1024] [--layers 22] [--sleep-ms 20]"""
import argparse
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

SEED = 1234
PROMPT = [1, 17, 42, 7, 99, 3]
CONTEXT = 1024  # the stream restarts from its prompt after this many tokens (deterministically)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--cpu-mib", type=int, default=1024)
    p.add_argument("--layers", type=int, default=22)
    p.add_argument("--sleep-ms", type=int, default=20)
    a = p.parse_args()

    # CPU state the process wrote: random bytes (neither zero pages nor compressible), touched page by page.
    heap = np.random.default_rng(SEED).integers(0, 256, size=a.cpu_mib << 20, dtype=np.uint8)

    torch.manual_seed(SEED)
    config = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=a.layers,
                         num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    prompt = torch.tensor([PROMPT], device="cuda")
    step, ids, past = 0, prompt, None
    with open(a.out, "a", buffering=1) as out, torch.no_grad():
        while True:
            result = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = result.past_key_values
            ids = result.logits[:, -1].argmax(-1, keepdim=True)
            step += 1
            out.write(f"{step} {int(ids.item())} {time.time():.3f} {int(heap[step % heap.size])}\n")
            if step % CONTEXT == 0:
                ids, past = prompt, None
            time.sleep(a.sleep_ms / 1000)


if __name__ == "__main__":
    main()
