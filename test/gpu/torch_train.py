"""A deterministic PyTorch training loop on the GPU: one line per step, "STEP LOSS_BITS PARAM_CHECKSUM_BITS", so
an interrupted (checkpointed, restored) run can be compared bit for bit with an uninterrupted one.
    python3 torch_train.py OUT [--steps N] [--sleep-ms MS]"""
import argparse
import os
import struct
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402


def bits(x: float) -> str:
    return struct.pack(">d", x).hex()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--sleep-ms", type=int, default=20)
    a = p.parse_args()
    torch.manual_seed(1234)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator(device="cpu").manual_seed(99)
    x_all = torch.randn(4096, 256, generator=gen).to(dev)
    y_all = torch.randint(0, 10, (4096,), generator=gen).to(dev)
    ballast = torch.ones(64 * 1024 * 1024, device=dev)  # 256 MiB more GPU state to carry
    step = 0
    while a.steps <= 0 or step < a.steps:
        step += 1
        idx = torch.arange((step * 256) % 4096, (step * 256) % 4096 + 256, device=dev) % 4096
        loss = torch.nn.functional.cross_entropy(model(x_all[idx]), y_all[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        ballast.mul_(1.0000001)
        with torch.no_grad():
            csum = sum(float(p.double().sum()) for p in model.parameters()) + float(ballast[:1024].double().sum())
        with open(a.out, "a") as f:
            f.write(f"{step} {bits(float(loss))} {bits(csum)}\n")
        if a.sleep_ms:
            time.sleep(a.sleep_ms / 1000)


if __name__ == "__main__":
    main()
