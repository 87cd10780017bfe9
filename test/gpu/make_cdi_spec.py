#!/usr/bin/env python3
"""Writes a CDI spec (Container Device Interface, cdiVersion 0.5.0: what podman 4.3 reads) for this machine's
NVIDIA GPUs, shaped like the one `nvidia-ctk cdi generate` writes on Kubernetes GPU nodes, from what is on the
machine: one device per GPU (nvidia.com/gpu=0, =1, ... and =all) with its /dev/nvidiaN node, and edits common
to all: the control nodes (nvidiactl, nvidia-uvm, nvidia-uvm-tools), the driver's user-space libraries and
nvidia-smi bind-mounted read-only at their host paths, and the environment the NVIDIA toolkit sets.

    make_cdi_spec.py [--dev DIR] [--driver-lib DIR ...] [--out FILE] [--kind VENDOR/CLASS]

nvidia-ctk also runs an ldcache hook inside the container; this spec puts the library directory on
LD_LIBRARY_PATH instead (the containers here have no ld.so.cache of their own).
"""
import argparse
import glob
import json
import os
import re
import sys

LIBRARIES = ["libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so",
             "libnvidia-nvvm.so", "libnvidia-gpucomp.so"]
CONTROL_NODES = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
BINARIES = ["nvidia-smi"]


def ro_mount(host_path: str, container_path: str) -> dict:
    return {"hostPath": host_path, "containerPath": container_path, "options": ["ro", "nosuid", "nodev", "bind"]}


def driver_mounts(lib_dirs: list[str]) -> tuple[list[dict], list[str]]:
    """Every versioned name of the driver's libraries (libcuda.so.1, libcuda.so.580.x), each the real file."""
    mounts, dirs = [], []
    for lib_dir in lib_dirs:
        for base in LIBRARIES:
            for path in sorted(glob.glob(os.path.join(lib_dir, base + ".*"))):
                if not re.search(r"\.so\.[0-9]", path) or not os.path.exists(path):
                    continue
                mounts.append(ro_mount(os.path.realpath(path), path))
                if lib_dir not in dirs:
                    dirs.append(lib_dir)
    return mounts, dirs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dev", default="/dev")
    p.add_argument("--driver-lib", action="append", default=[],
                   help="directory holding libcuda.so.1 (default: found through ldconfig -p)")
    p.add_argument("--out", default="/etc/cdi/nvidia.json")
    p.add_argument("--kind", default="nvidia.com/gpu", help="CDI kind (vendor/class) the devices are named under")
    a = p.parse_args()

    gpus = sorted(int(m.group(1)) for n in os.listdir(a.dev) if (m := re.fullmatch(r"nvidia([0-9]+)", n)))
    if not gpus:
        print(f"make_cdi_spec: no /dev/nvidiaN in {a.dev}: no NVIDIA GPU here", file=sys.stderr)
        return 2
    lib_dirs = a.driver_lib
    if not lib_dirs:
        out = os.popen("ldconfig -p").read()
        found = re.findall(r"libcuda\.so\.1 \(libc6,x86-64\) => (\S+)", out)
        lib_dirs = [os.path.dirname(found[0])] if found else []
    mounts, used_dirs = driver_mounts(lib_dirs)
    if not any(m["containerPath"].endswith("/libcuda.so.1") for m in mounts):
        print(f"make_cdi_spec: no libcuda.so.1 in {lib_dirs or 'the loader path'}: pass --driver-lib", file=sys.stderr)
        return 2
    for binary in BINARIES:
        for d in os.environ.get("PATH", "").split(":") + ["/usr/local/nvidia/bin", "/usr/bin"]:
            path = os.path.join(d, binary)
            if os.path.isfile(path):
                mounts.append(ro_mount(os.path.realpath(path), "/usr/bin/" + binary))
                break

    def node(name: str) -> dict:
        return {"path": os.path.join("/dev", name), "hostPath": os.path.join(a.dev, name)}

    spec = {
        "cdiVersion": "0.5.0",
        "kind": a.kind,
        "devices": [{"name": str(g), "containerEdits": {"deviceNodes": [node(f"nvidia{g}")]}} for g in gpus]
                   + [{"name": "all", "containerEdits": {"deviceNodes": [node(f"nvidia{g}") for g in gpus]}}],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void", "LD_LIBRARY_PATH=" + ":".join(used_dirs)],
            "deviceNodes": [node(n) for n in CONTROL_NODES if os.path.exists(os.path.join(a.dev, n))],
            "mounts": mounts,
        },
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(spec, f, indent=1)
    os.replace(tmp, a.out)
    print(f"make_cdi_spec: {a.out}: {len(gpus)} GPU(s), {len(mounts)} driver file(s) from {', '.join(used_dirs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
