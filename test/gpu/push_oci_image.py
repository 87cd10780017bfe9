#!/usr/bin/env python3
"""Pushes a directory as a one-layer OCI image to a plain-HTTP registry (Docker Registry HTTP API v2), for GPU
machines that have no podman, buildah or skopeo: the CRI tests need their images in a registry because
containerd >= 2.1 pulls a checkpoint's base image by name again at every restore.

    push_oci_image.py REGISTRY_HOST:PORT REPO:TAG ROOTFS_DIR [CMD...]   prints the manifest digest
"""
import gzip
import hashlib
import io
import json
import sys
import tarfile
import urllib.request


def request(method, url, body=b"", content_type="application/octet-stream"):
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": content_type})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.headers


def push_blob(base, repo, blob):
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    location = request("POST", f"{base}/v2/{repo}/blobs/uploads/")["Location"]
    if location.startswith("/"):
        location = base + location
    sep = "&" if "?" in location else "?"
    request("PUT", f"{location}{sep}digest={digest}", blob)
    return digest


def main():
    if len(sys.argv) < 4 or ":" not in sys.argv[2]:
        sys.exit("usage: push_oci_image.py REGISTRY_HOST:PORT REPO:TAG ROOTFS_DIR [CMD...]")
    base, (repo, tag), rootfs, cmd = "http://" + sys.argv[1], sys.argv[2].rsplit(":", 1), sys.argv[3], sys.argv[4:]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(rootfs, arcname=".")
    layer = gzip.compress(raw.getvalue(), compresslevel=1, mtime=0)
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Cmd": cmd or ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()]},
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(config),
                   "digest": push_blob(base, repo, config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "size": len(layer),
                    "digest": push_blob(base, repo, layer)}],
    }).encode()
    headers = request("PUT", f"{base}/v2/{repo}/manifests/{tag}", manifest, "application/vnd.oci.image.manifest.v1+json")
    print(headers.get("Docker-Content-Digest", "sha256:" + hashlib.sha256(manifest).hexdigest()))


if __name__ == "__main__":
    main()
