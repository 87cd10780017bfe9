"""Two (or more) torch.distributed NCCL ranks, one process per GPU, all-reducing in a loop: the shape of every
tensor-parallel inference server and DDP job. Run without --rank it is the launcher: it starts one child process
per rank (so the job is one process tree, as in a container) and waits for them.
Each rank writes its iteration count to OUT/rank<R>.iter every --every iterations (replaced atomically), and
checks every all-reduce's result, so a rank that stops or computes wrongly is seen from outside.
    python3 nccl_ranks.py OUT [--world 2] [--every 20]"""
import argparse
import os
import socket
import subprocess
import sys
import time


def launch(a: argparse.Namespace) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = []
    for rank in range(a.world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(a.world), LOCAL_RANK=str(rank))
        ranks.append(subprocess.Popen([sys.executable, __file__, a.out, "--rank", str(rank), "--world",
                                       str(a.world), "--every", str(a.every)], env=env))
    codes = [p.wait() for p in ranks]
    sys.exit(max(abs(c) for c in codes))


def run_rank(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(a.rank)
    dist.init_process_group("nccl", rank=a.rank, world_size=a.world)
    x = torch.empty(1 << 20, device="cuda")
    iteration = 0
    path = os.path.join(a.out, f"rank{a.rank}.iter")
    while True:
        x.fill_(float(a.rank + 1))
        dist.all_reduce(x)
        iteration += 1
        if iteration % a.every == 0:
            expected = a.world * (a.world + 1) / 2
            if x[0].item() != expected or x[-1].item() != expected:
                print(f"rank {a.rank}: all-reduce gave {x[0].item()}, expected {expected}", flush=True)
                sys.exit(3)
            with open(path + ".tmp", "w") as f:
                f.write(f"{iteration}\n")
            os.replace(path + ".tmp", path)
            time.sleep(0.005)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--every", type=int, default=20)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.rank < 0:
        launch(a)
    else:
        run_rank(a)


if __name__ == "__main__":
    main()
