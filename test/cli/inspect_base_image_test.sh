#!/usr/bin/env bash
# gpuckpt inspect on containerd CRI checkpoints: containerd 2.x pulls the base image by config.dump's rootfsImageRef
# before it restores; inspect warns (with what to do) when that reference names no registry digest, and names the
# registry the target must reach when it does. Archives of other engines get no such line.
set -euo pipefail
BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
CLI=$BUILD/cli/gpuckpt
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# make_archive FILE ENGINE ROOTFS_IMAGE_REF: a plain tar shaped like containerd's CRI checkpoint (or podman's)
make_archive() {
  python3 - "$@" <<'PY'
import io, json, sys, tarfile
path, engine, ref = sys.argv[1:4]
config = {"id": "abc123", "name": "counter", "rootfsImageName": "127.0.0.1:5000/app:1", "rootfsImageRef": ref}
annotations = {"io.kubernetes.cri.container-type": "container"} if engine == "containerd" else {"io.container.manager": "libpod"}
spec = {"ociVersion": "1.0.2", "annotations": annotations, "linux": {"devices": []}}
with tarfile.open(path, "w") as t:
    for name, data in (("config.dump", json.dumps(config)), ("spec.dump", json.dumps(spec)),
                       ("checkpoint/inventory.img", "\x01" * 86)):
        info = tarfile.TarInfo(name); info.size = len(data.encode()); t.addfile(info, io.BytesIO(data.encode()))
PY
}

make_archive "$TMP/side-loaded.tar" containerd sha256:1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a7988
"$CLI" inspect "$TMP/side-loaded.tar" > "$TMP/out.txt" || fail "inspect: $(cat "$TMP/out.txt")"
grep -q "^WARNING: .*pulling its base image by 'sha256:1f2e.*names no registry digest.*Push 127.0.0.1:5000/app:1 to a registry" \
  "$TMP/out.txt" || fail "no warning for a base image without registry digest: $(cat "$TMP/out.txt")"
"$CLI" inspect "$TMP/side-loaded.tar" --json |
  python3 -c 'import json,sys; p=json.load(sys.stdin)["containerd_base_image_pull"]; assert p["pullable"] is False and p["ref"].startswith("sha256:"), p' ||
  fail "inspect --json: containerd_base_image_pull"

make_archive "$TMP/pulled.tar" containerd "127.0.0.1:5000/app@sha256:1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a7988"
"$CLI" inspect "$TMP/pulled.tar" > "$TMP/out.txt" || fail "inspect: $(cat "$TMP/out.txt")"
grep -q "^base image:  containerd 2.x pulls 127.0.0.1:5000/app@sha256:.* must reach 127.0.0.1:5000 " "$TMP/out.txt" ||
  fail "no base image line naming the registry: $(cat "$TMP/out.txt")"
! grep -q WARNING "$TMP/out.txt" || fail "a warning for a pullable base image: $(cat "$TMP/out.txt")"

make_archive "$TMP/hub.tar" containerd "library/busybox@sha256:1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a7988"
"$CLI" inspect "$TMP/hub.tar" | grep -q "must reach docker.io " || fail "a Docker Hub reference is not named docker.io"

make_archive "$TMP/podman.tar" podman sha256:1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a7988
"$CLI" inspect "$TMP/podman.tar" > "$TMP/out.txt" || fail "inspect (podman): $(cat "$TMP/out.txt")"
! grep -Eq "WARNING|base image:" "$TMP/out.txt" || fail "containerd's pull note on a podman archive: $(cat "$TMP/out.txt")"
echo PASS
