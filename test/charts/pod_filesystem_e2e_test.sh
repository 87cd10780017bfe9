#!/usr/bin/env bash
# The chart's pod, without a cluster: the gpuckpt image (Containerfile, built by scripts/build-image.sh from this
# build tree, offline) runs under podman with exactly the rendered DaemonSet's layout: host sysfs/procfs/dev
# read-only under /host (from an H200 fixture tree), the state, archive and kubelet dirs, the token Secret file with
# its mode, the config written by the chart's own render-config step (run in the image), the container's own
# security settings (user, read-only root, no capabilities). Then /healthz, /metrics, the token on /v1 and the GPU
# inventory read through /host are checked over HTTP, and the read-only mounts are checked to be read-only.
set -euo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${GPUCKPT_BUILD_DIR:-$SRC/build}
skip() { echo "SKIP: $*"; exit 77; }
[ -x "$BUILD/agent/gpuckpt-agent" ] || skip "$BUILD/agent/gpuckpt-agent not built"
command -v helm >/dev/null 2>&1 || skip "helm not found (scripts/setup.sh installs it)"
command -v podman >/dev/null 2>&1 || skip "podman not found (scripts/setup.sh installs it)"
python3 -c 'import yaml' 2>/dev/null || skip "python3-yaml missing"
[ "$(id -u)" = 0 ] || skip "needs root (podman with host mounts)"

tmp=$(mktemp -d)
IMAGE=localhost/gpuckpt:pod-e2e-$$
NAME=gpuckpt-pod-e2e-$$
cleanup() { podman rm -f "$NAME" >/dev/null 2>&1; podman rmi -f "$IMAGE" >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
BUILD_DIR=$BUILD bash "$SRC/scripts/build-image.sh" "$IMAGE" || { echo "FAIL: scripts/build-image.sh"; exit 1; }

# What the chart renders: the pod spec and the ConfigMap.
helm template t "$SRC/charts/gpuckpt" --namespace gpuckpt-system --set runtime.kind=podman --set auth.token=0123456789abcdef-e2e-token \
  > "$tmp/rendered.yaml"
python3 - "$tmp" <<'PY'
import json, sys, yaml
tmp = sys.argv[1]
docs = [d for d in yaml.safe_load_all(open(f"{tmp}/rendered.yaml")) if d]
cm = next(d for d in docs if d["kind"] == "ConfigMap")
spec = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
open(f"{tmp}/config.in", "w").write(cm["data"]["config.yaml"])
open(f"{tmp}/host-files.sh", "w").write(cm["data"]["host-files.sh"])
secret = next(d for d in docs if d["kind"] == "Secret")
with open(f"{tmp}/secret.tsv", "w") as out:   # KEY BASE64 (the Secret volume's files)
    for key, value in secret["data"].items():
        out.write(f"{key}\t{value}\n")
agent = next(c for c in spec["containers"] if c["name"] == "agent")
vols = {v["name"]: v for v in spec["volumes"]}
with open(f"{tmp}/mounts.tsv", "w") as out:   # MOUNTPATH KIND SOURCE RO
    for m in agent["volumeMounts"]:
        v = vols[m["name"]]
        kind = "hostPath" if "hostPath" in v else "secret" if "secret" in v else "emptyDir" if "emptyDir" in v else "other"
        source = v["hostPath"]["path"] if kind == "hostPath" else m["name"]
        out.write(f"{m['mountPath']}\t{kind}\t{source}\t{'ro' if m.get('readOnly') else 'rw'}\n")
print("agent args:", json.dumps(agent["args"]))
PY

# The "node": host paths the pod mounts, with an H200 fixture standing in for /sys and /proc.
node="$tmp/node"
mkdir -p "$node"/{dev,run/crio}
fixture="$tmp/fixture"   # a copy: a mount that wrongly came out writable must not touch the source tree
mkdir -p "$fixture" && cp -a "$SRC/test/fixtures/nvidia-h200/sys" "$SRC/test/fixtures/nvidia-h200/proc" "$fixture/"
host_source() { # the node-side directory for a hostPath
  case $1 in /sys) echo "$fixture/sys" ;; /proc) echo "$fixture/proc" ;; *) mkdir -p "$node$1"; echo "$node$1" ;; esac
}
# The Secret volume's files with the volume's defaultMode (0400), the emptyDir, the ConfigMap's scripts.
mkdir -p "$tmp/secret" "$tmp/empty" "$tmp/chart"
while IFS=$'\t' read -r key value; do
  printf '%s' "$value" | base64 -d > "$tmp/secret/$key"; chmod 0400 "$tmp/secret/$key"
done < "$tmp/secret.tsv"
cp "$tmp/config.in" "$tmp/chart/config.yaml"; cp "$tmp/host-files.sh" "$tmp/chart/host-files.sh"

# podman arguments for the agent container: its mounts as the DaemonSet has them, its security context.
args=(--name "$NAME" -d --user 0 --read-only --cap-drop ALL --security-opt no-new-privileges -p 127.0.0.1::7469)
while IFS=$'\t' read -r path kind source mode; do
  case $kind in
    hostPath) if [ "$mode" = ro ]; then args+=(-v "$(host_source "$source"):$path:ro"); else args+=(-v "$(host_source "$source"):$path"); fi ;;
    secret) args+=(-v "$tmp/secret:$path:ro") ;;
    emptyDir) args+=(-v "$tmp/empty:$path") ;;
  esac
done < "$tmp/mounts.tsv"

# The chart's render-config init container, in the image, with the downward-API values the kubelet would give it.
podman run --rm --user 0 --read-only --cap-drop ALL -v "$tmp/chart:/opt/gpuckpt-chart:ro" -v "$tmp/empty:/etc/gpuckpt/config" \
  -e GPUCKPT_CONFIG_IN=/opt/gpuckpt-chart/config.yaml -e GPUCKPT_CONFIG_OUT=/etc/gpuckpt/config/config.yaml \
  -e NODE_NAME=gpu-node-1 -e NODE_IP=10.0.0.7 "$IMAGE" /bin/sh /opt/gpuckpt-chart/host-files.sh render-config
podman run "${args[@]}" "$IMAGE" gpuckpt-agent --config /etc/gpuckpt/config/config.yaml > /dev/null
addr=$(podman port "$NAME" 7469)
for _ in $(seq 100); do curl -sf "http://$addr/healthz" > /dev/null 2>&1 && break; sleep 0.1; done
c() { curl -s -o "$tmp/body" -w '%{http_code}' "$@"; }
{
  echo "healthz $(c "http://$addr/healthz")"
  echo "metrics $(c "http://$addr/metrics")"
  echo "gpus-no-token $(c "http://$addr/v1/gpus")"
  echo "gpus-wrong-token $(c -H 'Authorization: Bearer wrong-token-wrong-token' "http://$addr/v1/gpus")"
  echo "gpus $(c -H 'Authorization: Bearer 0123456789abcdef-e2e-token' "http://$addr/v1/gpus")"
  cp "$tmp/body" "$tmp/gpus.json"
  echo "node $(c -H 'Authorization: Bearer 0123456789abcdef-e2e-token' "http://$addr/v1/node")"
  cp "$tmp/body" "$tmp/node.json"
  # read-only where the chart says so: write attempts from inside the running agent container
  for p in /host/sys /host/proc /host/dev /usr/share/containers/oci/hooks.d /usr/lib/criu /usr/bin; do
    if podman exec "$NAME" /bin/sh -c "echo x > $p/.gpuckpt-write-test" 2>/dev/null; then echo "writable $p"; else echo "readonly $p"; fi
  done
  for p in /var/lib/gpuckpt /var/lib/gpuckpt/checkpoints /var/lib/kubelet/checkpoints; do
    if podman exec "$NAME" /bin/sh -c "echo x > $p/.gpuckpt-write-test && rm $p/.gpuckpt-write-test" 2>/dev/null; then echo "writable $p"; else echo "readonly $p"; fi
  done
  echo "agent-binary $(podman exec "$NAME" /bin/sh -c 'command -v gpuckpt-agent')"
} > "$tmp/result"
podman logs "$NAME" > "$tmp/agent.log" 2>&1 || true

pass=0 fail=0
expect() { if grep -qx "$1" "$tmp/result"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2 (want '$1')"; fi; }
expect "healthz 200" "the agent starts with the rendered config, token and mounts, and serves /healthz"
expect "metrics 200" "/metrics needs no token (Prometheus, the ServiceMonitor)"
expect "gpus-no-token 401" "/v1 without the token is refused"
expect "gpus-wrong-token 401" "/v1 with a wrong token is refused"
expect "gpus 200" "/v1/gpus with the Secret's token answers"
for p in /host/sys /host/proc /host/dev /usr/share/containers/oci/hooks.d /usr/lib/criu /usr/bin; do expect "readonly $p" "$p is read-only for the agent"; done
expect "node 200" "/v1/node answers in the pod layout"
if python3 - "$tmp/node.json" <<'PY'
import json, sys
checks = {c["name"]: c for c in json.load(open(sys.argv[1]))["checks"]}
assert checks["criu"]["status"] == "warn" and "not reachable" in checks["criu"]["detail"], checks["criu"]
assert checks["archive-space"]["status"] != "fail" and "/var/lib/gpuckpt/checkpoints" in checks["archive-space"]["detail"]
assert "fix" in checks["criu"]
PY
then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: /v1/node reports from the pod: CRIU out of reach (warn), archive space of the mounted dir"; fi
expect "agent-binary /usr/bin/gpuckpt-agent" "the agent runs from the image (/usr/bin/gpuckpt-agent), not from the build tree"
for p in /var/lib/gpuckpt /var/lib/gpuckpt/checkpoints /var/lib/kubelet/checkpoints; do expect "writable $p" "$p is writable for the agent"; done
if grep -q 'NVIDIA H200' "$tmp/gpus.json" 2>/dev/null && grep -q 'GPU-a2ce77ac-c70f-b672-0aa0-f871c0787910' "$tmp/gpus.json"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: /v1/gpus reports the H200 read through /host/sys and /host/proc"
fi
if [ "$fail" != 0 ]; then
  echo "--- result"; cat "$tmp/result"; echo "--- agent"; cat "$tmp/agent.log" 2>/dev/null || true
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
