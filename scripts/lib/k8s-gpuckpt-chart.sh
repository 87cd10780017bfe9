# shellcheck shell=bash
# Sourced by the cluster demo and the Helm test: charts/gpuckpt on the cluster of scripts/lib/k8s-sandbox.sh.
#   k8s_gpuckpt_values FILE VIEW REPO TAG [crio REGISTRY]
#                                           writes the chart values for that cluster: the image REPO:TAG (imported
#                                           into each node's containerd: pullPolicy Never), every host path under
#                                           VIEW (K8S_NODE_VIEW: a different directory on each node, so this
#                                           machine's own are never written), the CRI and NRI sockets of each
#                                           node's containerd, and the API server through the sandbox's route.
#                                           With crio: CRI-O's sockets, the image pulled (IfNotPresent; REPO in a
#                                           registry), the agents' checkpoint images pushed to REGISTRY (HOST:PORT,
#                                           plain HTTP, as pods reach it): CRI-O's store takes no load
#   k8s_gpuckpt_workdir NAME                makes TMP=/var/tmp/NAME-PID-SECONDS (mode 700) and sets VIEW=TMP/node
#                                           (for K8S_NODE_VIEW): not under /tmp, since the installer's plugin check
#                                           runs CRIU with a tmpfs over /tmp; short, since unix socket paths under it
#                                           must fit in 108 bytes
#   k8s_gpuckpt_teardown IMAGE [PID...]     ends the PIDs (empty ones skipped), stops the cluster (k8s_stop), removes
#                                           podman's IMAGE and TMP (KEEP=1 keeps TMP)
#   k8s_gpuckpt_ready IMAGE                 k8s_sandbox_ready IMAGE, and what installing the chart takes: helm,
#                                           iptables, podman, curl, python3-yaml, a base for scripts/build-image.sh;
#                                           0, or 1 with K8S_MISSING saying what is missing and what makes it
k8s_gpuckpt_values() {
  local file=$1 view=$2 repo=$3 tag=$4 runtime=${5:-containerd} pull=Never push=''
  if [ "$runtime" = crio ]; then
    pull=IfNotPresent
    push="  image_registry: {repository: $6/gpuckpt-checkpoints, plain_http: true}"
  fi
  cat > "$file" <<YAML
image: {repository: $repo, tag: $tag, pullPolicy: $pull}
# there is no cluster DNS here; the sandbox routes the kubernetes Service's address to the API server
hostAliases: [{ip: 10.96.0.1, hostnames: [kubernetes.default.svc]}]
host:
  stateDir: $view/host/var/lib/gpuckpt
  archiveDir: $view/host/var/lib/gpuckpt/checkpoints
  kubeletCheckpointDir: $view/kubelet/checkpoints
  podResourcesDir: $view/kubelet/pod-resources
  cdiSpecDirs: [$view/host/etc/cdi, $view/host/var/run/cdi]
  hooksDir: $view/host/hooks.d
  criuPluginDir: $view/host/usr/lib/criu
  installDir: $view/host/opt/gpuckpt
criuConfig: {dir: $view/host/etc/criu}
nodeLabels: {featureDir: $view/host/nfd/features.d}
runtime: {kind: cri, criSocket: $view/$runtime/$runtime.sock}
nri: {socket: $view/$runtime/nri.sock}
config:
  # the pods' termination grace follows (+60 s): a pod stopped during a job waits for it
  checkpoints: {watch_interval_seconds: 1, runtime_timeout_seconds: 60}
$push
YAML
}

k8s_gpuckpt_ready() {
  local tool arch
  k8s_sandbox_ready "$1" || return
  for tool in helm iptables podman curl; do
    command -v "$tool" >/dev/null || { k8s_missing "$tool not found (scripts/setup.sh installs it)"; return; }
  done
  python3 -c 'import yaml' 2>/dev/null || { k8s_missing "python3-yaml missing (scripts/setup.sh installs it)"; return; }
  arch=$(dpkg --print-architecture)
  podman image exists "localhost/gpuckpt-base:trixie-$arch" ||
    [ -x "${GPUCKPT_PREFIX:-/opt/gpuckpt}/roots/trixie-$arch/bin/sh" ] ||
    k8s_missing "no base for scripts/build-image.sh (scripts/setup.sh debootstraps it)"
}

k8s_gpuckpt_workdir() {
  TMP=/var/tmp/$1-$$-$(date +%s)
  mkdir -m 700 "$TMP"
  # shellcheck disable=SC2034 # the caller's
  VIEW=$TMP/node
}

k8s_gpuckpt_teardown() {
  local image=$1 p
  shift
  for p in "$@"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  k8s_stop
  podman rmi -f "$image" >/dev/null 2>&1
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
