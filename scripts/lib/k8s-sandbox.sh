# shellcheck shell=bash
# Sourced by tests: a real Kubernetes cluster on this machine, under one work directory, built by
# scripts/setup-k8s.sh: etcd, kube-apiserver (TLS with certificates made here by openssl, Node + RBAC
# authorization, service-account tokens signed by a key made here), kube-controller-manager and kube-scheduler,
# then one kubelet per node, each with its own root dir, its own containerd 2.x (scripts/lib/containerd-sandbox.sh)
# or CRI-O (scripts/lib/crio-sandbox.sh),
# its own network namespace and its own pod network (Debian's bridge + host-local CNI plugins, one bridge and
# subnet per node, inside the node's namespace). Nothing
# outside WORK is written but the nodes' cgroups (/sys/fs/cgroup/*/gpuckpt-k8s-NODE on cgroup v1,
# /sys/fs/cgroup/gpuckpt-k8s-NODE on v2) and the kernel settings the kubelet sets at start (vm.overcommit_memory,
# kernel.panic, kernel.panic_on_oops, ...): k8s_stop puts them back. (On cgroup v2 the controllers the kubelet
# needs are enabled in the root's cgroup.subtree_control and stay so. On cgroup v1, a hugetlb hierarchy the kernel
# has but nothing mounted is mounted at /sys/fs/cgroup/hugetlb while the cluster runs: CRI-O sets hugepage limits
# wherever the kernel has the controller, which runc cannot apply without it.) A machine without iproute2 (the GPU
# machine) is handled through scripts/lib/netif.py, one with loopback alone gets a bridge with an address of its
# own for the node IP (k8s_node_ip).
# Each kubelet runs in a mount namespace of its own where node-private directories cover the paths a kubelet uses
# whatever its --root-dir: /var/lib/kubelet (device-plugins/kubelet.sock and the device manager's allocation
# checkpoint) and /var/log (the containers/ log links); its root dir is a shared mount, so the volumes it mounts
# there reach containerd. (An empty /var/lib/kubelet is made on the host as the mount point where there is none,
# and removed at k8s_stop.) Device plugins register through each kubelet's own ROOT/plugins_registry.
# Each node's kubelet, containerd and so its pods live in a network namespace of the node's (where iproute2 is
# here; the GPU machine, without it, runs its one node in the machine's): a veth pair joins it to the machine, the
# node's address is 10.89.INDEX.2 (the machine's side 10.89.INDEX.1, its default route), and the machine routes
# the node's pod subnet 10.88.INDEX.0/24 to it; so pods of two nodes reach each other, and the machine reaches
# every pod, through the machine as through a router (net.ipv4.ip_forward on while the cluster runs). The API
# server and the tests' registry listen on the machine's address, which every node reaches.
#   K8S_BIN=DIR                       the programs (default PREFIX/k8s/VERSION/bin of setup-k8s.sh)
#   k8s_start_control_plane WORK      certificates, etcd, API server, controller-manager, scheduler; waits until
#                                     the API server is ready and the default service account exists. Sets
#                                     K8S_WORK KUBECONFIG (the admin's: system:masters) K8S_API K8S_NODE_IP (the
#                                     machine's address: the API server's) K8S_CONTROL_PLANE_SECONDS
#   K8S_CONTROL_PLANE_MINIMAL=1       (before k8s_start_control_plane, optional) etcd and the API server only:
#                                     no controller-manager, no scheduler (pods then name their node in
#                                     spec.nodeName and mount no service-account token: no controller makes
#                                     kube-root-ca.crt); the default service account is made with kubectl
#   K8S_CNI_BIN_DIR=DIR               (before k8s_add_node, optional) the CNI plugins (default /usr/lib/cni)
#   k8s_add_node NAME                 containerd 2.x (or CRI-O) + kubelet (ContainerCheckpoint on, cgroupfs, cgroup
#                                     v1 allowed) as node NAME in its network namespace; waits until the node is
#                                     Ready. Sets K8S_KUBELET_ROOT[NAME] (its root dir: checkpoints/,
#                                     plugins_registry/, pod-resources/), K8S_RUNTIME[NAME] (containerd or crio),
#                                     K8S_CRI_SOCK[NAME], K8S_NRI_SOCK[NAME], K8S_RUNTIME_WORK[NAME] (the
#                                     runtime's work dir), K8S_CTRD_SOCK[NAME] (containerd), K8S_NODE_PORT[NAME],
#                                     K8S_NODE_ADDR[NAME] (its InternalIP), K8S_NETNS[NAME] (its namespace's name
#                                     under /run/netns; empty: the machine's), K8S_NODE_SECONDS
#   K8S_NODE_RUNTIME=containerd|crio  (before k8s_add_node, optional; default containerd) the node's runtime.
#                                     CRI-O (CRIO, default K8S_BIN/crio) pulls every image from the tests'
#                                     registry, its pause image too: k8s_start_registry comes first
#   K8S_CRIO_HOOKS_DIR=DIR            (before k8s_add_node of a CRI-O node, optional) CRI-O's hooks.d (default: an
#                                     empty one of the node's)
#   K8S_NODE_NETNS=0|1                (before k8s_add_node, optional) a network namespace per node (default: 1
#                                     where iproute2 is here)
#   K8S_NODE_VIEW=DIR                 (before k8s_add_node, optional) an empty host directory over which each
#                                     node's mount namespaces (its kubelet's, its containerd's and so its pods')
#                                     see that node's own work dir: one host path names a different directory on
#                                     each node, as on real nodes (a DaemonSet's hostPath volumes: CRI and NRI
#                                     sockets at DIR/containerd/, the kubelet's root at DIR/kubelet/)
#   k8s_start_registry DIR            ctrd_start_registry for the cluster: REGISTRY is 127.0.0.1:PORT on the
#                                     machine and on every node (in a node's namespace its loopback's PORT is
#                                     forwarded to the machine's), so image references are the same everywhere
#   k8s_service_proxy                 pods reach the API server at the kubernetes Service's 10.96.0.1:443
#   k8s_node_ctrd NAME                makes node NAME's containerd the one ctrd_* functions talk to
#   k8s_kubectl ARGS...               kubectl as the cluster admin
#   k8s_crictl NAME ARGS...           crictl against node NAME's runtime
#   k8s_dra_claim CLAIM [CLASS] [DRIVER]  a DeviceClass and a ResourceClaim of one device (DRA), as YAML
#   k8s_sandbox_ready IMAGE [PROGRAM...]
#                                     whether this machine has what such a cluster needs (root, K8S_BIN's programs
#                                     and PROGRAMs, containerd 2.x in CTRD_BIN_DIR, the CNI plugins, docker-registry,
#                                     a CRIU that dumps here) and podman's IMAGE for its pods: 0, or 1 with
#                                     K8S_MISSING saying what is missing and what makes it
#   k8s_wait_pod NS POD [SECONDS]     waits until the pod is Running with every container ready (default 60 s)
#   k8s_wait_gpus NODE COUNT          waits up to 30 s until NODE offers COUNT allocatable nvidia.com/gpu (its
#                                     device plugin registered with its kubelet)
#   k8s_kubelet_checkpoint NODE NS POD CONTAINER
#                                     the kubelet checkpoint API as operators call it: POST
#                                     /api/v1/nodes/NODE/proxy/checkpoint/NS/POD/CONTAINER through the API server
#                                     (kubectl create --raw). Sets K8S_ARCHIVE (the one archive the kubelet names)
#                                     and K8S_CHECKPOINT_SECONDS; 1 with K8S_CHECKPOINT_ERROR saying why
#   k8s_pod_count POD                 the counter of k8s_gpu_counter_pod's POD (kubectl exec through the API
#                                     server), tried for 2 s; 1 if it has none
#   k8s_stop                          stops every node (kubelet, its pods, containerd), the control plane, puts
#                                     the kernel settings back, removes the nodes' cgroups; safe twice
# Every wait is bounded; a component that does not come up prints the tail of its log and fails.

K8S_BIN=${K8S_BIN:-${GPUCKPT_PREFIX:-/opt/gpuckpt}/k8s/v1.37.2/bin}
K8S_CGROUP_CONTROLLERS=(cpu cpuacct cpuset memory pids devices freezer blkio hugetlb systemd)
# The settings kubelet writes at start (its setupKernelTunables), and the forwarding the per-node network namespaces
# need on the machine: saved at k8s_start_control_plane, put back at k8s_stop, so that a test leaves the machine as
# it found it.
K8S_KERNEL_TUNABLES=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes net.ipv4.ip_forward)
declare -gA K8S_NODE_BRIDGE K8S_KUBELET_PID K8S_KUBELET_ROOT K8S_CTRD_SOCK K8S_CTRD_PID K8S_CTRD_WORK K8S_NODE_PORT
declare -gA K8S_NODE_ADDR K8S_NETNS K8S_NODE_VETH K8S_RUNTIME K8S_CRI_SOCK K8S_NRI_SOCK K8S_RUNTIME_WORK K8S_CRIO_PID
if [ -z "${K8S_NODE_NETNS:-}" ]; then command -v ip >/dev/null && K8S_NODE_NETNS=1 || K8S_NODE_NETNS=0; fi
K8S_NODES=() K8S_PIDS=() K8S_SAVED_TUNABLES=() K8S_SERVICE_RULE=() K8S_HOST_BRIDGE='' K8S_LOOPBACK_PORTS=()
K8S_MOUNTED_HUGETLB=0 K8S_CRIO_PAUSE='' K8S_MADE_RUN_CRIO=0
K8S_NETIF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/netif.py
# shellcheck source=scripts/lib/criu-probe.sh
. "$(dirname "${BASH_SOURCE[0]}")/criu-probe.sh"
# shellcheck source=scripts/lib/crio-sandbox.sh
. "$(dirname "${BASH_SOURCE[0]}")/crio-sandbox.sh"

# k8s_sysctl NAME [VALUE]: reads (or writes) a kernel setting through /proc/sys (no procps needed)
k8s_sysctl() {
  local file=/proc/sys/${1//.//}
  if [ $# -eq 1 ]; then cat "$file"; else echo "$2" > "$file"; fi
}

# k8s_node_ip: sets K8S_NODE_IP, the address the nodes and the API server advertise: the machine's own (the API
# server refuses loopback for its service endpoint, the kubelet for its node IP): the default route's source, else
# any global address (through iproute2, else netif.py), else, on a machine with loopback alone, the address of a
# bridge of its own (gck-host, 10.87.0.1/24; k8s_stop removes it)
k8s_node_ip() {
  K8S_NODE_IP=''
  if command -v ip >/dev/null; then
    K8S_NODE_IP=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i+1)}')
    [ -n "$K8S_NODE_IP" ] || K8S_NODE_IP=$(ip -4 -o addr show scope global | awk '{sub(/\/.*/, "", $4); print $4; exit}')
  fi
  [ -n "$K8S_NODE_IP" ] || K8S_NODE_IP=$(python3 "$K8S_NETIF" ipv4) || K8S_NODE_IP=''
  [ -z "$K8S_NODE_IP" ] || return 0
  python3 "$K8S_NETIF" add-bridge gck-host 10.87.0.1/24 ||
    { echo "k8s-sandbox: no IPv4 address but loopback here, and no bridge can be made for one" >&2; return 1; }
  K8S_HOST_BRIDGE=gck-host K8S_NODE_IP=10.87.0.1
}

# k8s_delete_bridge NAME: removes a bridge (iproute2, else netif.py)
k8s_delete_bridge() {
  if command -v ip >/dev/null; then ip link delete "$1" 2>/dev/null; else python3 "$K8S_NETIF" delete-bridge "$1"; fi
}

k8s_kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG" "$@"; }

# k8s_crictl NAME ARGS...: crictl against node NAME's runtime
k8s_crictl() {
  "$K8S_BIN/crictl" --runtime-endpoint "unix://${K8S_CRI_SOCK[$1]}" --image-endpoint "unix://${K8S_CRI_SOCK[$1]}" \
    "${@:2}" 2> >(grep -v 'level=warning msg="Config' >&2)
}

k8s_free_port() { k8s_free_ports 1; }
# k8s_free_ports N: N different free ports on one line (held open together while the kernel picks them: ports
# picked one by one may repeat, as two listeners of one component once did)
k8s_free_ports() {
  python3 -c 'import socket, sys
s = [socket.socket() for _ in range(int(sys.argv[1]))]
for x in s: x.bind(("", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))' "$1"
}

k8s_log_tail() { echo "--- last lines of $1" >&2; tail -n "${2:-25}" "$1" >&2; }

# k8s_cert NAME CN [O] [SAN]: a key and a certificate signed by the cluster's CA under WORK/pki
k8s_cert() {
  local pki=$K8S_WORK/pki name=$1 cn=$2 org=${3:-} san=${4:-} subj ext
  subj="/CN=$cn${org:+/O=$org}"
  ext=$pki/$name.ext
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } > "$ext"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null &&
    openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
      -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
}

# k8s_kubeconfig FILE CERT_NAME: a kubeconfig for the API server with the client certificate CERT_NAME
k8s_kubeconfig() {
  local file=$1 pki=$K8S_WORK/pki
  "$K8S_BIN/kubectl" --kubeconfig "$file" config set-cluster local --server "$K8S_API" \
    --certificate-authority "$pki/ca.crt" --embed-certs >/dev/null &&
    "$K8S_BIN/kubectl" --kubeconfig "$file" config set-credentials user --client-certificate "$pki/$2.crt" \
      --client-key "$pki/$2.key" --embed-certs >/dev/null &&
    "$K8S_BIN/kubectl" --kubeconfig "$file" config set-context local --cluster local --user user >/dev/null &&
    "$K8S_BIN/kubectl" --kubeconfig "$file" config use-context local >/dev/null
}

# k8s_daemon LOG PROGRAM ARGS...: starts a component in the background; its pid is appended to K8S_PIDS
k8s_daemon() {
  local log=$1; shift
  "$@" > "$log" 2>&1 &
  K8S_PIDS+=("$!")
}

k8s_start_control_plane() {
  K8S_WORK=$1
  local pki=$K8S_WORK/pki etcd_port peer_port api_port t0 _ k programs=(etcd kube-apiserver kubelet kubectl)
  mkdir -p "$pki" "$K8S_WORK/logs"
  [ "${K8S_CONTROL_PLANE_MINIMAL:-0}" = 1 ] || programs+=(kube-controller-manager kube-scheduler)
  for k in "${programs[@]}"; do
    [ -x "$K8S_BIN/$k" ] || { echo "k8s-sandbox: $K8S_BIN/$k missing (scripts/setup-k8s.sh builds it)" >&2; return 1; }
  done
  K8S_SAVED_TUNABLES=()
  K8S_MADE_VAR_LIB_KUBELET=0
  if [ ! -e /var/lib/kubelet ]; then
    mkdir /var/lib/kubelet || return 1
    K8S_MADE_VAR_LIB_KUBELET=1
  fi
  for k in "${K8S_KERNEL_TUNABLES[@]}"; do K8S_SAVED_TUNABLES+=("$k=$(k8s_sysctl "$k")"); done
  k8s_node_ip || return 1
  k8s_hugetlb_hierarchy || return 1
  if [ "$K8S_NODE_NETNS" = 1 ]; then k8s_sysctl net.ipv4.ip_forward 1 || return 1; fi
  read -r etcd_port peer_port api_port < <(k8s_free_ports 3)
  K8S_API=https://$K8S_NODE_IP:$api_port

  t0=$(date +%s.%N)
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -subj /CN=gpuckpt-test-ca -days 2 \
    -out "$pki/ca.crt" 2>/dev/null || { echo "k8s-sandbox: openssl cannot make the CA" >&2; return 1; }
  if ! { k8s_cert apiserver kube-apiserver "" \
      "IP:$K8S_NODE_IP,IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" &&
    k8s_cert admin admin system:masters &&
    k8s_cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters &&
    k8s_cert controller-manager system:kube-controller-manager &&
    k8s_cert scheduler system:kube-scheduler &&
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null &&
    openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null; }; then
    echo "k8s-sandbox: openssl cannot make the certificates or the service-account key" >&2
    return 1
  fi
  KUBECONFIG=$K8S_WORK/admin.kubeconfig
  k8s_kubeconfig "$KUBECONFIG" admin && k8s_kubeconfig "$K8S_WORK/controller-manager.kubeconfig" controller-manager &&
    k8s_kubeconfig "$K8S_WORK/scheduler.kubeconfig" scheduler || return 1

  k8s_daemon "$K8S_WORK/logs/etcd.log" "$K8S_BIN/etcd" --name default --data-dir "$K8S_WORK/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "default=http://127.0.0.1:$peer_port" --unsafe-no-fsync --log-level warn
  k8s_daemon "$K8S_WORK/logs/kube-apiserver.log" "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" --bind-address 0.0.0.0 --secure-port "$api_port" \
    --advertise-address "$K8S_NODE_IP" --cert-dir "$K8S_WORK/apiserver" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --client-ca-file "$pki/ca.crt" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --service-cluster-ip-range 10.96.0.0/24 --allow-privileged=true --profiling=false
  for _ in $(seq 300); do
    k8s_kubectl get --raw /readyz >/dev/null 2>&1 && break
    kill -0 "${K8S_PIDS[1]}" 2>/dev/null || break
    sleep 0.2
  done
  k8s_kubectl get --raw /readyz >/dev/null 2>&1 || {
    echo "k8s-sandbox: the API server is not ready within 60 s" >&2
    k8s_log_tail "$K8S_WORK/logs/etcd.log" 10; k8s_log_tail "$K8S_WORK/logs/kube-apiserver.log"; return 1; }

  if [ "${K8S_CONTROL_PLANE_MINIMAL:-0}" = 1 ]; then
    # (the API server makes the default namespace itself, moments after it is ready)
    for _ in $(seq 100); do
      k8s_kubectl -n default create serviceaccount default >/dev/null 2>&1 && break
      sleep 0.2
    done
    k8s_kubectl -n default get serviceaccount default >/dev/null ||
      { echo "k8s-sandbox: kubectl cannot make the default service account" >&2; return 1; }
    # shellcheck disable=SC2034 # for the caller
    K8S_CONTROL_PLANE_SECONDS=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
    return 0
  fi
  k8s_daemon "$K8S_WORK/logs/kube-controller-manager.log" "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$K8S_WORK/controller-manager.kubeconfig" --authentication-kubeconfig "$K8S_WORK/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$K8S_WORK/controller-manager.kubeconfig" --bind-address 127.0.0.1 --secure-port "$(k8s_free_port)" \
    --leader-elect=false --use-service-account-credentials --service-account-private-key-file "$pki/sa.key" \
    --root-ca-file "$pki/ca.crt" --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --allocate-node-cidrs=false --profiling=false
  k8s_daemon "$K8S_WORK/logs/kube-scheduler.log" "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$K8S_WORK/scheduler.kubeconfig" --authentication-kubeconfig "$K8S_WORK/scheduler.kubeconfig" \
    --authorization-kubeconfig "$K8S_WORK/scheduler.kubeconfig" --bind-address 127.0.0.1 --secure-port "$(k8s_free_port)" \
    --leader-elect=false --profiling=false
  # the service-account controller makes each namespace's "default" account, without which no pod is admitted
  for _ in $(seq 300); do
    k8s_kubectl -n default get serviceaccount default >/dev/null 2>&1 && break
    sleep 0.2
  done
  k8s_kubectl -n default get serviceaccount default >/dev/null 2>&1 || {
    echo "k8s-sandbox: no default service account within 60 s" >&2
    k8s_log_tail "$K8S_WORK/logs/kube-controller-manager.log"; return 1; }
  # shellcheck disable=SC2034 # for the caller: how long the control plane took to come up
  K8S_CONTROL_PLANE_SECONDS=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
}

# k8s_hugetlb_hierarchy: on cgroup v1, mounts the hugetlb hierarchy where the kernel has the controller enabled
# (/proc/cgroups) and nothing mounts it (before any node's cgroups exist: a kubelet requires its cgroup root in
# every hierarchy mounted); k8s_stop unmounts it
k8s_hugetlb_hierarchy() {
  K8S_MOUNTED_HUGETLB=0
  [ ! -f /sys/fs/cgroup/cgroup.controllers ] && [ ! -e /sys/fs/cgroup/hugetlb ] || return 0
  awk '$1 == "hugetlb" && $4 == 1 { found = 1 } END { exit !found }' /proc/cgroups 2>/dev/null || return 0
  grep -qw hugetlb /proc/self/mounts && return 0
  if ! { mkdir /sys/fs/cgroup/hugetlb && mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb; }; then
    rmdir /sys/fs/cgroup/hugetlb 2>/dev/null
    echo "k8s-sandbox: cannot mount the cgroup v1 hugetlb hierarchy" >&2
    return 1
  fi
  K8S_MOUNTED_HUGETLB=1
}

# k8s_node_cgroup NAME: the node's cgroup root in every v1 hierarchy (cpuset needs its parent's cpus and mems), or
# on cgroup v2 the node's cgroup with the controllers the kubelet requires of it (cpu cpuset memory hugetlb pids,
# those the kernel has) enabled from the root down to its children
k8s_node_cgroup() {
  local c dir controllers
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    dir=/sys/fs/cgroup/gpuckpt-k8s-$1
    mkdir -p "$dir" || return 1
    read -ra controllers < /sys/fs/cgroup/cgroup.controllers
    for c in "${controllers[@]}"; do
      case $c in cpu|cpuset|memory|hugetlb|pids) ;; *) continue ;; esac
      grep -qw "$c" /sys/fs/cgroup/cgroup.subtree_control || echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control || return 1
      echo "+$c" > "$dir/cgroup.subtree_control" || return 1
    done
    return 0
  fi
  for c in "${K8S_CGROUP_CONTROLLERS[@]}"; do
    [ -d "/sys/fs/cgroup/$c" ] || continue
    dir=/sys/fs/cgroup/$c/gpuckpt-k8s-$1
    mkdir -p "$dir" || return 1
    if [ "$c" = cpuset ]; then
      cat /sys/fs/cgroup/cpuset/cpuset.cpus > "$dir/cpuset.cpus" && cat /sys/fs/cgroup/cpuset/cpuset.mems > "$dir/cpuset.mems" ||
        return 1
    fi
  done
}

# k8s_node_cni NAME INDEX: the pod network of a node: its own bridge and /24 (10.88.INDEX.0), the bridge the pods'
# default route (to the host: the API server through k8s_service_proxy)
k8s_node_cni() {
  local name=$1 index=$2 dir=${K8S_RUNTIME_WORK[$1]}/cni
  mkdir -p "$dir"
  K8S_NODE_BRIDGE[$name]=gck-br$index
  # written whole, then renamed: a runtime that watches the directory never reads half of it
  cat > "$dir/10-gpuckpt.conflist.new" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "gpuckpt-$name",
  "plugins": [
    {"type": "bridge", "bridge": "gck-br$index", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.$index.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "${K8S_RUNTIME_WORK[$1]}/cni-ipam"}},
    {"type": "loopback"}
  ]
}
JSON
  mv "$dir/10-gpuckpt.conflist.new" "$dir/10-gpuckpt.conflist"
}

# k8s_node_netns NAME INDEX: node NAME's network namespace gck-PID-INDEX joined to the machine by the veth pair
# gck-vhINDEX (the machine's, 10.89.INDEX.1/24) - gck-vnINDEX (the node's, 10.89.INDEX.2/24, its default route
# through the machine), forwarding on inside, and the machine's route to the node's pod subnet 10.88.INDEX.0/24.
# A pair left by a test that died is removed first (the cluster tests run one at a time).
k8s_node_netns() {
  local name=$1 i=$2 ns=gck-$$-$2
  ip link delete "gck-vh$i" 2>/dev/null
  ip netns add "$ns" || return 1
  K8S_NETNS[$name]=$ns
  ip link add "gck-vh$i" type veth peer name "gck-vn$i" netns "$ns" &&
    ip addr add "10.89.$i.1/24" dev "gck-vh$i" && ip link set "gck-vh$i" up &&
    ip -n "$ns" link set lo up && ip -n "$ns" addr add "10.89.$i.2/24" dev "gck-vn$i" &&
    ip -n "$ns" link set "gck-vn$i" up && ip -n "$ns" route add default via "10.89.$i.1" &&
    nsenter "--net=/run/netns/$ns" -- sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward' &&
    ip route add "10.88.$i.0/24" via "10.89.$i.2" dev "gck-vh$i" || return 1
  K8S_NODE_ADDR[$name]=10.89.$i.2 K8S_NODE_VETH[$name]=gck-vn$i
}

# k8s_node_loopback NAME PORT: in node NAME's namespace, 127.0.0.1:PORT is the machine's K8S_NODE_IP:PORT (DNAT of
# locally made connections, route_localnet so that a loopback destination may be rewritten, the source masqueraded
# onto the node's veth); nothing changes on the machine. No-op for a node in the machine's namespace.
k8s_node_loopback() {
  local ns=${K8S_NETNS[$1]:-}
  [ -n "$ns" ] || return 0
  # shellcheck disable=SC2016 # expanded by the namespace's shell
  nsenter "--net=/run/netns/$ns" -- sh -c 'echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet &&
    iptables -t nat -A OUTPUT -d 127.0.0.1/32 -p tcp --dport "$1" -j DNAT --to-destination "$2:$1" &&
    { iptables -t nat -C POSTROUTING -s 127.0.0.0/8 -o "$3" -j MASQUERADE 2>/dev/null ||
      iptables -t nat -A POSTROUTING -s 127.0.0.0/8 -o "$3" -j MASQUERADE; }' sh "$2" "$K8S_NODE_IP" "${K8S_NODE_VETH[$1]}"
}

k8s_start_registry() {
  local name
  CTRD_REGISTRY_LISTEN=$([ "$K8S_NODE_NETNS" = 1 ] && echo 0.0.0.0 || echo 127.0.0.1) ctrd_start_registry "$1" || return 1
  K8S_LOOPBACK_PORTS+=("${REGISTRY##*:}")
  for name in "${K8S_NODES[@]}"; do
    k8s_node_loopback "$name" "${REGISTRY##*:}" || { echo "k8s-sandbox: cannot forward node $name's 127.0.0.1:${REGISTRY##*:}" >&2; return 1; }
  done
}

k8s_node_ctrd() {
  CTRD_SOCK=${K8S_CTRD_SOCK[$1]} CTRD_PID=${K8S_CTRD_PID[$1]} CTRD_WORK=${K8S_CTRD_WORK[$1]}
}

# k8s_node_containerd NAME WORK [WRAPPER...]: node NAME's containerd 2.x under WORK/containerd, started through
# WRAPPER (its network and mount namespaces), CNI plugins from Debian's containernetworking-plugins
k8s_node_containerd() {
  local name=$1 work=$2 started=0
  CTRD_BIN_DIR=${CTRD_BIN_DIR:-${GPUCKPT_PREFIX:-/opt/gpuckpt}/containerd2/usr/bin}
  # shellcheck disable=SC2034 # read by ctrd_start (containerd-sandbox.sh)
  CTRD_WRAPPER=("${@:3}")
  CTRD_CNI_BIN_DIR=${K8S_CNI_BIN_DIR:-/usr/lib/cni} ctrd_start "$work/containerd" || started=$?
  # shellcheck disable=SC2034 # read by ctrd_start
  CTRD_WRAPPER=()
  [ "$started" = 0 ] || { echo "k8s-sandbox: node $name's containerd did not start" >&2; return 1; }
  K8S_CTRD_SOCK[$name]=$CTRD_SOCK K8S_CTRD_PID[$name]=$CTRD_PID K8S_CTRD_WORK[$name]=$CTRD_WORK
  K8S_CRI_SOCK[$name]=$CTRD_SOCK K8S_NRI_SOCK[$name]=$CTRD_NRI_SOCK K8S_RUNTIME_WORK[$name]=$CTRD_WORK
}

# k8s_node_crio NAME WORK [WRAPPER...]: node NAME's CRI-O under WORK/crio, started through WRAPPER, pulling from the
# tests' registry (plain HTTP; as 127.0.0.1:PORT and as the machine's K8S_NODE_IP:PORT, the name pods reach it by):
# its pause image (containerd-sandbox.sh's, pushed there once) too. With K8S_NODE_VIEW, the node's mount namespaces
# see its CRI-O socket at CRI-O's default /run/crio/crio.sock, as a CRI-O node's own programs (the chart's
# installer) look for it (an empty /run/crio is made on the machine as the mount point where there is none, and
# removed at k8s_stop), and CRI-O's mount namespace has / shared
k8s_node_crio() {
  local name=$1 work=$2 started=0 wrapper=("${@:3}")
  [ -n "${REGISTRY:-}" ] || { echo "k8s-sandbox: a CRI-O node pulls from the tests' registry: k8s_start_registry first" >&2; return 1; }
  if [ -z "$K8S_CRIO_PAUSE" ]; then
    if ! { ctrd_make_pause_image &&
      podman push -q --tls-verify=false "$CTRD_PAUSE_IMAGE" "docker://$REGISTRY/gpuckpt-pause:latest"; }; then
      echo "k8s-sandbox: cannot push the pause image to $REGISTRY" >&2
      return 1
    fi
    K8S_CRIO_PAUSE=$REGISTRY/gpuckpt-pause:latest
  fi
  mkdir -p "$work/crio-hooks.d"
  if [ -n "${K8S_NODE_VIEW:-}" ]; then
    if [ ! -e /run/crio ]; then mkdir /run/crio && K8S_MADE_RUN_CRIO=1; fi
    # and / shared there, as on a systemd host: CRI-O refuses a hostPath volume with HostToContainer propagation
    # (the chart's host root) from a private mount (in that namespace only; the machine's / stays as it is)
    # shellcheck disable=SC2016 # expanded by the namespace's shell
    wrapper+=(sh -c 'mount --make-rshared / && mount --bind "$1" /run/crio && shift && exec "$@"' sh "$work/crio")
  fi
  # shellcheck disable=SC2034 # read by crio_start (crio-sandbox.sh)
  CRIO_WRAPPER=(${wrapper[@]+"${wrapper[@]}"})
  CRIO=${CRIO:-$K8S_BIN/crio} CRIO_PAUSE_IMAGE=$K8S_CRIO_PAUSE CRIO_INSECURE_REGISTRY="$REGISTRY $K8S_NODE_IP:${REGISTRY##*:}" \
    CRIO_CNI_BIN_DIR=${K8S_CNI_BIN_DIR:-/usr/lib/cni} \
    crio_start "$work/crio" "${K8S_CRIO_HOOKS_DIR:-$work/crio-hooks.d}" || started=$?
  # shellcheck disable=SC2034
  CRIO_WRAPPER=()
  K8S_CRIO_PID[$name]=${CRIO_PID:-}
  [ "$started" = 0 ] || { echo "k8s-sandbox: node $name's CRI-O did not start" >&2; k8s_log_tail "$work/crio/crio.log"; return 1; }
  # shellcheck disable=SC2034 # K8S_NRI_SOCK: for the caller (its NRI plugins)
  K8S_CRI_SOCK[$name]=$CRIO_SOCK K8S_NRI_SOCK[$name]=$CRIO_NRI_SOCK K8S_RUNTIME_WORK[$name]=$work/crio
}

k8s_add_node() {
  local name=$1 index=$(( ${#K8S_NODES[@]} + 1 )) work=$K8S_WORK/nodes/$1 pki=$K8S_WORK/pki port _ t0 ready
  t0=$(date +%s.%N)
  mkdir -p "$work"
  k8s_node_cgroup "$name" || { echo "k8s-sandbox: cannot make node $name's cgroups" >&2; return 1; }
  K8S_NODES+=("$name")
  K8S_NETNS[$name]='' K8S_NODE_ADDR[$name]=$K8S_NODE_IP
  if [ "$K8S_NODE_NETNS" = 1 ]; then
    k8s_node_netns "$name" "$index" || { echo "k8s-sandbox: cannot make node $name's network namespace" >&2; return 1; }
  fi
  local in_netns=() addr=${K8S_NODE_ADDR[$name]} loopback_port
  for loopback_port in ${K8S_LOOPBACK_PORTS[@]+"${K8S_LOOPBACK_PORTS[@]}"}; do
    k8s_node_loopback "$name" "$loopback_port" || { echo "k8s-sandbox: cannot forward node $name's 127.0.0.1:$loopback_port" >&2; return 1; }
  done
  [ -z "${K8S_NETNS[$name]}" ] || in_netns=(nsenter "--net=/run/netns/${K8S_NETNS[$name]}" --)
  # the kubelet's root dir a shared mount before the runtime starts: with K8S_NODE_VIEW, the runtime's own mount
  # namespace gets a peer of it, so the volumes the kubelet mounts there reach the runtime
  mkdir -p "$work/kubelet" "$work/var-lib-kubelet" "$work/var-log" "$work/pod-logs"
  if ! { mount --bind "$work/kubelet" "$work/kubelet" && mount --make-shared "$work/kubelet"; }; then
    echo "k8s-sandbox: cannot make $work/kubelet a shared mount" >&2
    return 1
  fi
  local view_wrapper=()
  if [ -n "${K8S_NODE_VIEW:-}" ]; then
    mkdir -p "$K8S_NODE_VIEW" || return 1
    # shellcheck disable=SC2016 # expanded by the namespace's shell
    view_wrapper=(unshare --mount --propagation unchanged -- sh -c 'mount --rbind "$1" "$2" && shift 2 && exec "$@"' sh
      "$work" "$K8S_NODE_VIEW")
  fi
  K8S_RUNTIME[$name]=${K8S_NODE_RUNTIME:-containerd}
  case "${K8S_RUNTIME[$name]}" in
    containerd) k8s_node_containerd "$name" "$work" ${in_netns[@]+"${in_netns[@]}"} ${view_wrapper[@]+"${view_wrapper[@]}"} ;;
    crio) k8s_node_crio "$name" "$work" ${in_netns[@]+"${in_netns[@]}"} ${view_wrapper[@]+"${view_wrapper[@]}"} ;;
    *) echo "k8s-sandbox: K8S_NODE_RUNTIME=${K8S_RUNTIME[$name]}: containerd or crio" >&2; false ;;
  esac || return 1
  k8s_node_cni "$name" "$index"

  port=$(k8s_free_port)
  # shellcheck disable=SC2034 # for the caller: the kubelet's port and root dir
  K8S_NODE_PORT[$name]=$port K8S_KUBELET_ROOT[$name]=$work/kubelet
  k8s_cert "kubelet-$name" "system:node:$name" system:nodes "IP:$addr,DNS:$name" &&
    k8s_kubeconfig "$work/kubelet.kubeconfig" "kubelet-$name" || return 1
  cat > "$work/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $addr
port: $port
readOnlyPort: 0
healthzPort: 0
tlsCertFile: $pki/kubelet-$name.crt
tlsPrivateKeyFile: $pki/kubelet-$name.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://${K8S_CRI_SOCK[$name]}
cgroupDriver: cgroupfs
cgroupRoot: /gpuckpt-k8s-$name
cgroupsPerQOS: true
# this machine has cgroup v1 only (the kubelet refuses it unless told)
failCgroupV1: false
failSwapOn: false
featureGates:
  ContainerCheckpoint: true
clusterDomain: cluster.local
resolvConf: ""
staticPodPath: ""
maxPods: 20
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
# a test machine's disk may be fuller than a node's defaults allow; never evict or collect the test's images
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 5s
podLogsDir: $work/pod-logs
YAML
  # shellcheck disable=SC2016 # expanded by the namespace's shell
  k8s_daemon "$work/kubelet.log" ${in_netns[@]+"${in_netns[@]}"} unshare --mount --propagation unchanged -- sh -c \
    'mount --bind "$1" /var/lib/kubelet && mount --bind "$2" /var/log && { [ -z "$3" ] || mount --rbind "$4" "$3"; } &&
     shift 4 && exec "$@"' sh \
    "$work/var-lib-kubelet" "$work/var-log" "${K8S_NODE_VIEW:-}" "$work" "$K8S_BIN/kubelet" --config "$work/kubelet.yaml" \
    --kubeconfig "$work/kubelet.kubeconfig" --root-dir "$work/kubelet" --cert-dir "$work/kubelet-pki" \
    --hostname-override "$name" --node-ip "$addr" -v 2
  K8S_KUBELET_PID[$name]=${K8S_PIDS[-1]}
  for _ in $(seq 300); do
    ready=$(k8s_kubectl get node "$name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
    [ "$ready" = True ] && break
    kill -0 "${K8S_KUBELET_PID[$name]}" 2>/dev/null || break
    sleep 0.2
  done
  [ "$ready" = True ] || {
    echo "k8s-sandbox: node $name is not Ready within 60 s (Ready=$ready)" >&2
    k8s_kubectl get node "$name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}' >&2 2>/dev/null
    k8s_log_tail "$work/kubelet.log" 40; return 1; }
  # shellcheck disable=SC2034 # for the caller: how long the node took to become Ready
  K8S_NODE_SECONDS=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
}

# k8s_service_proxy: what kube-proxy does for the "kubernetes" Service only: pods reach the API server at its
# ClusterIP 10.96.0.1:443 (a DNAT rule in the host's nat table, removed by k8s_stop). There is no cluster DNS:
# a pod that calls https://kubernetes.default.svc needs a hostAliases entry for it.
k8s_service_proxy() {
  K8S_SERVICE_RULE=(PREROUTING -d 10.96.0.1/32 -p tcp --dport 443 -m comment --comment "gpuckpt-k8s-sandbox $$"
    -j DNAT --to-destination "${K8S_API#https://}")
  iptables -t nat -A "${K8S_SERVICE_RULE[@]}" ||
    { K8S_SERVICE_RULE=(); echo "k8s-sandbox: iptables cannot add the DNAT rule for 10.96.0.1:443" >&2; return 1; }
}

# k8s_gpu_counter_pod IMAGE PULL_POLICY [NODE [NAME]]: the manifest of the tests' and demo's GPU pod, NAME (default
# gpu-counter) in default: a counter in /tmp/count (K8S_GPU_COUNTER: written then renamed, a read never sees it
# half-written) asking the kubelet for one nvidia.com/gpu, on NODE when given. With a checkpoint image as IMAGE it
# is the pod that restores one: containerd needs a command, but the process that runs is the checkpoint's (a fresh
# start would count from 1, which the tests tell apart).
# shellcheck disable=SC2016 # expanded by the container's shell
K8S_GPU_COUNTER='i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done'
k8s_gpu_counter_pod() {
  local on_node=""
  [ -z "${3:-}" ] || on_node=$'\n'"  nodeSelector: {kubernetes.io/hostname: $3}"
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: ${4:-gpu-counter}, namespace: default}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1$on_node
  containers:
  - name: counter
    image: $1
    imagePullPolicy: $2
    command: [sh, -c, '$K8S_GPU_COUNTER']
    resources: {limits: {nvidia.com/gpu: 1}}
YAML
}

# k8s_dra_claim CLAIM [CLASS] [DRIVER]: the manifests of DeviceClass CLASS (default sim-gpu: every device of DRIVER,
# default gpu.sim.gpuckpt.dev, the tests' sim-dra-driver) and of ResourceClaim CLAIM in default, asking for one
# device of that class
k8s_dra_claim() {
  cat <<YAML
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: ${2:-sim-gpu}}
spec:
  selectors:
  - cel: {expression: 'device.driver == "${3:-gpu.sim.gpuckpt.dev}"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $1, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: ${2:-sim-gpu}}
YAML
}

# k8s_missing WHY: K8S_MISSING=WHY (read by the callers of the *_ready functions), and 1
# shellcheck disable=SC2034
k8s_missing() { K8S_MISSING=$1; return 1; }
k8s_sandbox_ready() {
  local image=$1 p
  shift
  [ "$(id -u)" = 0 ] || { k8s_missing "needs root (kubelet, containerd, runc, CRIU)"; return; }
  for p in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl crictl sim-device-plugin "$@"; do
    [ -x "$K8S_BIN/$p" ] || { k8s_missing "$K8S_BIN/$p missing (scripts/setup-k8s.sh builds it)"; return; }
  done
  [ -x "$CTRD_BIN_DIR/containerd" ] ||
    { k8s_missing "containerd 2.x not installed in $CTRD_BIN_DIR (scripts/setup.sh)"; return; }
  { [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ]; } ||
    { k8s_missing "no CNI plugins in /usr/lib/cni (scripts/setup-k8s.sh)"; return; }
  command -v docker-registry >/dev/null || { k8s_missing "docker-registry not installed (scripts/setup.sh)"; return; }
  command -v criu >/dev/null || { k8s_missing "criu not installed (scripts/setup.sh)"; return; }
  criu_dump_works || { k8s_missing "$CRIU_PROBE_REASON"; return; }
  podman image exists "$image" || k8s_missing "image $image missing (scripts/setup.sh builds it)"
}

k8s_wait_gpus() {
  local _
  for _ in $(seq 150); do
    [ "$(k8s_kubectl get node "$1" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')" = "$2" ] && return 0
    sleep 0.2
  done
  [ "$(k8s_kubectl get node "$1" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')" = "$2" ]
}

# shellcheck disable=SC2034 # K8S_ARCHIVE, K8S_CHECKPOINT_*: for the caller
k8s_kubelet_checkpoint() {
  local answer=$K8S_WORK/kubelet-checkpoint.json t0
  K8S_ARCHIVE='' K8S_CHECKPOINT_ERROR='' K8S_CHECKPOINT_SECONDS=''
  t0=$(date +%s.%N)
  if ! k8s_kubectl create --raw "/api/v1/nodes/$1/proxy/checkpoint/$2/$3/$4" -f /dev/null > "$answer"; then
    K8S_CHECKPOINT_ERROR="the kubelet checkpoint API failed: $(cat "$answer")"
    return 1
  fi
  K8S_CHECKPOINT_SECONDS=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  K8S_ARCHIVE=$(python3 -c 'import json,sys; i=json.load(open(sys.argv[1]))["items"]; assert len(i)==1, i; print(i[0])' \
    "$answer" 2>/dev/null) || { K8S_CHECKPOINT_ERROR="the kubelet's answer names no single archive: $(cat "$answer")"; return 1; }
}

k8s_pod_count() {
  local n _
  for _ in $(seq 20); do
    n=$(k8s_kubectl exec "$1" -c counter -- cat /tmp/count 2>/dev/null || true)
    [ -n "$n" ] && { echo "$n"; return 0; }
    sleep 0.1
  done
  return 1
}

k8s_wait_pod() {
  local ns=$1 pod=$2 seconds=${3:-60} phase ready _
  for _ in $(seq $(( seconds * 5 ))); do
    phase=$(k8s_kubectl -n "$ns" get pod "$pod" -o jsonpath='{.status.phase}' 2>/dev/null || true)
    ready=$(k8s_kubectl -n "$ns" get pod "$pod" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
    [ "$phase" = Running ] && [ "$ready" = True ] && return 0
    [ "$phase" = Failed ] || [ "$phase" = Succeeded ] && break
    sleep 0.2
  done
  echo "k8s-sandbox: pod $ns/$pod not running and ready within $seconds s (phase '$phase'):" >&2
  k8s_kubectl -n "$ns" describe pod "$pod" 2>&1 | tail -n 25 >&2
  return 1
}

k8s_stop() {
  [ -n "${K8S_WORK:-}" ] || return 0
  local name pid i c t m pods
  # kubelets first (so none restarts a pod), then each node's containerd with its pods, then the control plane
  for name in "${K8S_NODES[@]}"; do
    pid=${K8S_KUBELET_PID[$name]:-}
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  for name in "${K8S_NODES[@]}"; do
    [ -n "${K8S_CRI_SOCK[$name]:-}" ] || continue   # its runtime never started
    # the pods' sandboxes through CRI first: StopPodSandbox has the CNI plugins remove the pod's veth and address
    # and containerd its network namespace (/run/netns/cni-*), which killing the tasks would leave behind
    mapfile -t pods < <(k8s_crictl "$name" pods -q 2>/dev/null)
    if [ ${#pods[@]} -gt 0 ]; then
      k8s_crictl "$name" stopp "${pods[@]}" >/dev/null 2>&1
      k8s_crictl "$name" rmp -f "${pods[@]}" >/dev/null 2>&1
    fi
    if [ "${K8S_RUNTIME[$name]}" = crio ]; then
      CRIO_WORK=${K8S_RUNTIME_WORK[$name]} CRIO_PID=${K8S_CRIO_PID[$name]}
      crio_stop
    else
      k8s_node_ctrd "$name"
      ctrd_stop
    fi
  done
  for (( i = ${#K8S_PIDS[@]} - 1; i >= 0; i-- )); do
    kill "${K8S_PIDS[$i]}" 2>/dev/null && wait "${K8S_PIDS[$i]}" 2>/dev/null
  done
  for name in "${K8S_NODES[@]}"; do
    # the namespace takes its bridge, its veth end and so the machine's end and route with it
    if [ -n "${K8S_NETNS[$name]:-}" ]; then
      ip netns delete "${K8S_NETNS[$name]}" 2>/dev/null
    elif [ -n "${K8S_NODE_BRIDGE[$name]:-}" ]; then
      k8s_delete_bridge "${K8S_NODE_BRIDGE[$name]}"
    fi
    # (and the cgroup v2 tree: "unified" beside v1's in hybrid mode, where the kubelet mirrors its pods, or the
    # only one)
    for c in "${K8S_CGROUP_CONTROLLERS[@]}" unified ""; do
      [ -d "/sys/fs/cgroup/$c/gpuckpt-k8s-$name" ] || continue
      # deepest first: a cgroup is removed only when it has no children and no tasks
      find "/sys/fs/cgroup/$c/gpuckpt-k8s-$name" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
  done
  [ ${#K8S_SERVICE_RULE[@]} -gt 0 ] && iptables -t nat -D "${K8S_SERVICE_RULE[@]}" 2>/dev/null
  K8S_SERVICE_RULE=()
  [ -z "$K8S_HOST_BRIDGE" ] || k8s_delete_bridge "$K8S_HOST_BRIDGE"
  K8S_HOST_BRIDGE=''
  for t in "${K8S_SAVED_TUNABLES[@]}"; do k8s_sysctl "${t%%=*}" "${t#*=}" 2>/dev/null; done
  while read -r _ m _; do
    case "$m" in "$K8S_WORK"/*) umount -l "$m" 2>/dev/null ;; esac
  done < <(sort -r -k2 /proc/self/mounts)
  [ "${K8S_MADE_VAR_LIB_KUBELET:-0}" = 1 ] && rmdir /var/lib/kubelet 2>/dev/null
  if [ "$K8S_MOUNTED_HUGETLB" = 1 ]; then umount /sys/fs/cgroup/hugetlb 2>/dev/null && rmdir /sys/fs/cgroup/hugetlb; fi
  [ "$K8S_MADE_RUN_CRIO" = 1 ] && rmdir /run/crio 2>/dev/null
  K8S_MOUNTED_HUGETLB=0 K8S_CRIO_PAUSE='' K8S_MADE_RUN_CRIO=0
  K8S_MADE_VAR_LIB_KUBELET=0
  K8S_NODES=() K8S_PIDS=() K8S_WORK='' K8S_LOOPBACK_PORTS=() K8S_CRI_SOCK=() K8S_RUNTIME=()
  return 0
}
