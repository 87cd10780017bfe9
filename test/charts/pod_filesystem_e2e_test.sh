#!/usr/bin/env bash
# The chart's pod, without a cluster: the real gpuckpt-agent starts inside a private mount + network namespace
# whose filesystem is laid out exactly as the rendered DaemonSet mounts it (host sysfs/procfs/dev read-only under
# /host, from an H200 fixture tree; the state, archive and kubelet dirs; the token Secret file with its mode; the
# config written by the chart's own render-config step). Then /healthz, /metrics, the token on /v1 and the GPU
# inventory read through /host are checked over HTTP, and the read-only mounts are checked to be read-only.
set -euo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
AGENT="${GPUCKPT_BUILD_DIR:-$SRC/build}/agent/gpuckpt-agent"
skip() { echo "SKIP: $*"; exit 77; }
[ -x "$AGENT" ] || skip "$AGENT not built"
command -v helm >/dev/null 2>&1 || skip "helm not found (scripts/setup.sh installs it)"
python3 -c 'import yaml' 2>/dev/null || skip "python3-yaml missing"
[ "$(id -u)" = 0 ] || skip "needs root (mount namespace, bind mounts)"
unshare --mount --net true 2>/dev/null || skip "cannot create mount/network namespaces here"

tmp=$(mktemp -d)
cleanup() { [ -n "${agent_pid:-}" ] && kill "$agent_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

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
root="$tmp/root"; node="$tmp/node"
mkdir -p "$root"/{usr,proc,tmp,etc} "$node"/{dev,run/crio}
ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"; ln -s usr/bin "$root/bin"; ln -s usr/sbin "$root/sbin"
cp /etc/ld.so.cache "$root/etc/"
fixture="$tmp/fixture"   # a copy: a mount that wrongly came out writable must not touch the source tree
mkdir -p "$fixture" && cp -a "$SRC/test/fixtures/nvidia-h200/sys" "$SRC/test/fixtures/nvidia-h200/proc" "$fixture/"
host_source() { # the node-side directory for a hostPath
  case $1 in /sys) echo "$fixture/sys" ;; /proc) echo "$fixture/proc" ;; *) mkdir -p "$node$1"; echo "$node$1" ;; esac
}

# The pod's filesystem, built in a private mount namespace, then the agent chrooted into it.
cat > "$tmp/pod.sh" <<'POD'
set -euo pipefail
tmp=$1 root=$2 agent=$3
ip link set lo up
# the image's /usr: the host's, behind an overlay so that mount points below it cost the host nothing
mkdir -p "$tmp/usr-upper" "$tmp/usr-work"
mount -t overlay overlay -o "lowerdir=/usr,upperdir=$tmp/usr-upper,workdir=$tmp/usr-work" "$root/usr"
mount --bind /proc "$root/proc"
while IFS=$'\t' read -r path kind source mode; do
  mkdir -p "$root$path"
  case $kind in
    hostPath) mount --bind "$source" "$root$path" ;;
    secret)   # the Secret's keys as files, with the volume's defaultMode (0400)
      while IFS=$'\t' read -r key value; do
        printf '%s' "$value" | base64 -d > "$root$path/$key"; chmod 0400 "$root$path/$key"
      done < "$tmp/secret.tsv" ;;
    emptyDir) ;;
  esac
  [ "$mode" = ro ] && [ "$kind" = hostPath ] && mount -o remount,bind,ro "$root$path"
done < "$tmp/mounts.tsv.resolved"
# the chart's render-config step, with the downward-API values the kubelet would give it
GPUCKPT_CONFIG_IN="$tmp/config.in" GPUCKPT_CONFIG_OUT="$root/etc/gpuckpt/config/config.yaml" NODE_NAME=gpu-node-1 \
  NODE_IP=10.0.0.7 sh "$tmp/host-files.sh" render-config
cp "$agent" "$root/tmp/gpuckpt-agent"
chroot "$root" /tmp/gpuckpt-agent --config /etc/gpuckpt/config/config.yaml > "$tmp/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:7469/healthz > /dev/null 2>&1 && break; kill -0 "$agent_pid" || break; sleep 0.1; done
c() { curl -s -o "$tmp/body" -w '%{http_code}' "$@"; }
echo "healthz $(c http://127.0.0.1:7469/healthz)"
echo "metrics $(c http://127.0.0.1:7469/metrics)"
echo "gpus-no-token $(c http://127.0.0.1:7469/v1/gpus)"
echo "gpus-wrong-token $(c -H 'Authorization: Bearer wrong-token-wrong-token' http://127.0.0.1:7469/v1/gpus)"
echo "gpus $(c -H 'Authorization: Bearer 0123456789abcdef-e2e-token' http://127.0.0.1:7469/v1/gpus)"
cp "$tmp/body" "$tmp/gpus.json"
# read-only where the chart says so: write attempts from inside the pod's filesystem
for p in /host/sys /host/proc /host/dev /usr/share/containers/oci/hooks.d /usr/lib/criu; do
  if chroot "$root" /bin/sh -c "echo x > $p/.gpuckpt-write-test" 2>/dev/null; then echo "writable $p"; else echo "readonly $p"; fi
done
for p in /var/lib/gpuckpt /var/lib/gpuckpt/checkpoints /var/lib/kubelet/checkpoints; do
  if chroot "$root" /bin/sh -c "echo x > $p/.gpuckpt-write-test && rm $p/.gpuckpt-write-test" 2>/dev/null; then echo "writable $p"; else echo "readonly $p"; fi
done
kill "$agent_pid"; wait "$agent_pid" 2>/dev/null || true
POD
while IFS=$'\t' read -r path kind source mode; do
  [ "$kind" = hostPath ] && source=$(host_source "$source")
  printf '%s\t%s\t%s\t%s\n' "$path" "$kind" "$source" "$mode"
done < "$tmp/mounts.tsv" > "$tmp/mounts.tsv.resolved"

unshare --mount --net --propagation private bash "$tmp/pod.sh" "$tmp" "$root" "$AGENT" > "$tmp/result" 2> "$tmp/pod.err" || true

pass=0 fail=0
expect() { if grep -qx "$1" "$tmp/result"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2 (want '$1')"; fi; }
expect "healthz 200" "the agent starts with the rendered config, token and mounts, and serves /healthz"
expect "metrics 200" "/metrics needs no token (Prometheus, the ServiceMonitor)"
expect "gpus-no-token 401" "/v1 without the token is refused"
expect "gpus-wrong-token 401" "/v1 with a wrong token is refused"
expect "gpus 200" "/v1/gpus with the Secret's token answers"
for p in /host/sys /host/proc /host/dev /usr/share/containers/oci/hooks.d /usr/lib/criu; do expect "readonly $p" "$p is read-only for the agent"; done
for p in /var/lib/gpuckpt /var/lib/gpuckpt/checkpoints /var/lib/kubelet/checkpoints; do expect "writable $p" "$p is writable for the agent"; done
if grep -q 'NVIDIA H200' "$tmp/gpus.json" 2>/dev/null && grep -q 'GPU-a2ce77ac-c70f-b672-0aa0-f871c0787910' "$tmp/gpus.json"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: /v1/gpus reports the H200 read through /host/sys and /host/proc"
fi
if [ "$fail" != 0 ]; then
  echo "--- result"; cat "$tmp/result"; echo "--- pod"; cat "$tmp/pod.err"; echo "--- agent"; cat "$tmp/agent.log" 2>/dev/null || true
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
