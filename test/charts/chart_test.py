#!/usr/bin/env python3
"""Renders charts/gpuckpt with real `helm lint` / `helm template` across value sets and checks what matters:
mounts (read-only vs read-write), privileges, RBAC rules per feature, affinity, tolerations, the agent config's
shape against agent/config.example.yaml, and that bad combinations fail with their fix-it text.

    chart_test.py SOURCE_DIR [--dump-objects FILE]   (FILE: every rendered object as JSON, for schema checks)
"""
import json
import os
import subprocess
import sys
import tempfile

import yaml

SRC = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(SRC, "charts", "gpuckpt")
HELM = os.environ.get("HELM", "helm")
NS = "gpuckpt-system"
FAILURES = []
CHECKS = 0


def check(cond, what):
    global CHECKS
    CHECKS += 1
    if not cond:
        FAILURES.append(what)
        print(f"  FAIL {what}")


def helm(*args, expect_ok=True):
    proc = subprocess.run([HELM, *args], capture_output=True, text=True)
    if expect_ok and proc.returncode != 0:
        raise SystemExit(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def render(sets, extra=()):
    args = ["template", "t", CHART, "--namespace", NS]
    for s in sets:
        args += ["--set-json" if s.startswith("json:") else "--set", s.removeprefix("json:")]
    args += list(extra)
    out = helm(*args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def lint(sets):
    args = ["lint", CHART, "--strict", "--namespace", NS]
    for s in sets:
        args += ["--set-json" if s.startswith("json:") else "--set", s.removeprefix("json:")]
    proc = helm(*args, expect_ok=False)
    return proc


def by_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def one(objs, kind):
    found = by_kind(objs, kind)
    check(len(found) == 1, f"exactly one {kind} (found {len(found)})")
    return found[0] if found else {}


def pod_spec(objs):
    return one(objs, "DaemonSet")["spec"]["template"]["spec"]


def container(spec, name, init=False):
    for c in spec.get("initContainers" if init else "containers", []) or []:
        if c["name"] == name:
            return c
    return None


def host_mounts(spec, c):
    """{mountPath: (hostPath, readOnly)} for the hostPath volumes container c mounts."""
    vols = {v["name"]: v for v in spec["volumes"]}
    out = {}
    for m in c.get("volumeMounts", []):
        v = vols.get(m["name"])
        check(v is not None, f"{c['name']}: mount {m['name']} has a volume")
        if v and "hostPath" in v:
            out[m["mountPath"]] = (v["hostPath"]["path"], bool(m.get("readOnly", False)))
    return out


def agent_config(objs):
    cm = one(objs, "ConfigMap")
    return yaml.safe_load(cm["data"]["config.yaml"]), cm


def leaf_paths(d, prefix=""):
    out = set()
    for k, v in d.items():
        p = f"{prefix}.{k}" if prefix else k
        out |= leaf_paths(v, p) if isinstance(v, dict) else {p}
    return out


def rules(objs):
    roles = by_kind(objs, "ClusterRole")
    if not roles:
        return set()
    return {(res, verb) for r in roles[0]["rules"] for res in r["resources"] for verb in r["verbs"]}


EXAMPLE = yaml.safe_load(open(os.path.join(SRC, "agent", "config.example.yaml")))
EXAMPLE_KEYS = leaf_paths(EXAMPLE)


# ---- the checks every rendering must pass ----------------------------------------------------------------------
def common_checks(objs, name):
    spec = pod_spec(objs)
    cfg, cm = agent_config(objs)

    # Privileges: no privileged pod features, no capabilities, no privilege escalation, read-only root fs.
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        check(not spec.get(key), f"[{name}] pod does not set {key}")
    for c in spec["containers"] + spec.get("initContainers", []):
        if c["name"] == "install-host-files":
            continue   # verifies with the host's CRIU: installer_checks
        sc = c.get("securityContext", {})
        if c["name"] != "render-config":   # touches no host path
            check(sc.get("seLinuxOptions") == {"type": "spc_t"}, f"[{name}] {c['name']} runs as SELinux spc_t (host dirs)")
        check(not sc.get("privileged"), f"[{name}] {c['name']} not privileged")
        check(sc.get("allowPrivilegeEscalation") is False, f"[{name}] {c['name']} allowPrivilegeEscalation=false")
        check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"[{name}] {c['name']} drops ALL capabilities")
        if not (c["name"] == "agent" and cfg.get("runtime", {}).get("kind") == "containerd"):   # test_containerd_runtime
            check(not sc.get("capabilities", {}).get("add"), f"[{name}] {c['name']} adds no capability")
        check(sc.get("readOnlyRootFilesystem") is True, f"[{name}] {c['name']} read-only root filesystem")
        check("resources" in c and c["resources"].get("limits", {}).get("memory"), f"[{name}] {c['name']} has a memory limit")

    # The agent: sysfs/procfs/dev read-only under /host; read-write only the directories it writes.
    agent = container(spec, "agent")
    mounts = host_mounts(spec, agent)
    for host in ("/sys", "/proc", "/dev"):
        check(mounts.get("/host" + host) == (host, True), f"[{name}] agent mounts {host} read-only at /host{host}")
    rw = {path for path, (_, ro) in mounts.items() if not ro}
    allowed_rw = {cfg["state_dir"], cfg["checkpoints"]["dir"]}
    if cfg["checkpoints"].get("kubelet_dir"):
        allowed_rw.add(cfg["checkpoints"]["kubelet_dir"])
    if cfg.get("node_labels", {}).get("method") == "nfd_feature_file" and cfg["node_labels"].get("enabled"):
        allowed_rw.add(os.path.dirname(cfg["node_labels"]["feature_file"]))
    runtime = cfg.get("runtime", {})
    socket = runtime.get("cri", {}).get("endpoint") or runtime.get("containerd", {}).get("address")
    if socket:
        allowed_rw.add(os.path.dirname(socket.removeprefix("unix://")))
    if runtime.get("kind") == "containerd":
        allowed_rw.add("/var/lib/containerd")
    check(rw == allowed_rw, f"[{name}] agent's read-write host mounts are exactly {sorted(allowed_rw)} (got {sorted(rw)})")
    for path in rw:
        check(mounts[path][0] == path, f"[{name}] agent sees host {mounts[path][0]} at the same path")
    check(mounts.get(cfg["hooks_dir"]) == (cfg["hooks_dir"], True), f"[{name}] agent sees hooks.d read-only")
    check(mounts.get(cfg["criu_plugin_dir"]) == (cfg["criu_plugin_dir"], True), f"[{name}] agent sees the CRIU plugin dir read-only")

    # Config <-> pod wiring.
    check(leaf_paths(cfg) <= EXAMPLE_KEYS, f"[{name}] config keys are agent config keys: unknown {sorted(leaf_paths(cfg) - EXAMPLE_KEYS)}")
    check(cfg["host_root"] == "/host", f"[{name}] host_root is /host")
    check(cfg["version"] == 1, f"[{name}] config version 1")
    check(not any(v is None for v in leaf_paths_values(cfg)), f"[{name}] config has no null values")
    port = agent["ports"][0]
    check(port["containerPort"] == cfg["listen"]["port"] and port["name"] == "http", f"[{name}] container port = listen.port")
    for probe in ("livenessProbe", "readinessProbe"):
        check(agent.get(probe, {}).get("httpGet", {}).get("path") == "/healthz", f"[{name}] {probe} on /healthz")
    token_mount = [m for m in agent["volumeMounts"] if m["name"] == "api-token"]
    check(len(token_mount) == 1 and token_mount[0].get("readOnly"), f"[{name}] token mounted read-only")
    if token_mount:
        check(cfg["auth"]["token_file"].startswith(token_mount[0]["mountPath"] + "/"), f"[{name}] auth.token_file is in the token mount")
    secret_vol = next(v for v in spec["volumes"] if v["name"] == "api-token")["secret"]
    check(secret_vol["defaultMode"] == 0o400, f"[{name}] token file mode 0400 (the agent refuses group/other access)")
    check(agent["args"][:2] == ["--config", "/etc/gpuckpt/config/config.yaml"], f"[{name}] agent runs with --config")
    agent_accepts(name, cm["data"]["config.yaml"], cfg)
    render_init = container(spec, "render-config", init=True)
    check(render_init is not None and host_mounts(spec, render_init) == {}, f"[{name}] render-config touches no host path")

    # Scheduling.
    check(spec.get("priorityClassName") == "system-node-critical", f"[{name}] priorityClassName system-node-critical")
    tols = {t.get("key") for t in spec.get("tolerations", [])}

    # The installed hook entry points at the installed binary with the agent's state dir.
    hook = json.loads(cm["data"]["gpuckpt-hook.json"])
    check(hook["version"] == "1.0.0", f"[{name}] hooks.d entry version 1.0.0")
    check(hook["hook"]["args"][hook["hook"]["args"].index("--state-dir") + 1] == cfg["state_dir"], f"[{name}] hook --state-dir = agent state_dir")
    # Exactly the entries oci-hook/ ships, with the installed binary's path and the chart's state dir.
    repo_entries = sorted(f for f in os.listdir(os.path.join(SRC, "oci-hook")) if f.startswith("gpuckpt-hook") and f.endswith(".json"))
    chart_entries = sorted(k for k in cm["data"] if k.startswith("gpuckpt-hook"))
    check(repo_entries and chart_entries == repo_entries, f"[{name}] chart installs the hooks.d entries oci-hook/ ships: {chart_entries} vs {repo_entries}")
    for f in repo_entries:
        want = json.load(open(os.path.join(SRC, "oci-hook", f)))
        want["hook"]["path"] = hook["hook"]["path"]
        args = want["hook"]["args"]
        args[args.index("--state-dir") + 1] = cfg["state_dir"]
        got = json.loads(cm["data"].get(f, "{}"))
        check(got == want, f"[{name}] {f} is oci-hook/{f} with the install path and state dir: {got} vs {want}")
    check(cm["data"]["host-files.sh"] == open(os.path.join(CHART, "files", "host-files.sh")).read(), f"[{name}] ConfigMap carries files/host-files.sh unchanged")
    return spec, cfg, cm, agent, tols, hook


AGENT = os.path.join(os.environ.get("GPUCKPT_BUILD_DIR", os.path.join(SRC, "build")), "agent", "gpuckpt-agent")


def agent_accepts(name, cfg_text, cfg):
    """The real gpuckpt-agent parses the rendered config: it gets past step 1 (config) to step 2 (token file,
    absent here), having logged the settings it read."""
    if not os.access(AGENT, os.X_OK) or os.path.exists(cfg["auth"]["token_file"]):
        return
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(cfg_text.replace("@NODE_NAME@", "gpu-node-1").replace("@NODE_IP@", "10.0.0.7"))
        f.flush()
        proc = subprocess.run([AGENT, "--config", f.name], capture_output=True, text=True, timeout=20)
    err = proc.stderr
    check(proc.returncode == 2 and "cannot read the API token file " + cfg["auth"]["token_file"] in err,
          f"[{name}] gpuckpt-agent accepts the rendered config (stops at the token): rc {proc.returncode}: {err[-500:]}")
    check(f"param: runtime.kind:{cfg['runtime']['kind']}" in err and "param: host_root:/host" in err and
          f"param: node_labels.enabled:{1 if cfg.get('node_labels', {}).get('enabled') else 0}" in err,
          f"[{name}] the agent runs with the chart's runtime kind, host root and label setting")


def leaf_paths_values(d):
    for v in d.values():
        if isinstance(v, dict):
            yield from leaf_paths_values(v)
        else:
            yield v


def cm_data(objs):
    return next(o for o in objs if o["kind"] == "ConfigMap")["data"]


def installer_checks(objs, name, spec, cfg, hook, install_dir="/opt/gpuckpt"):
    init = container(spec, "install-host-files", init=True)
    side = container(spec, "host-files")
    check(init is not None and side is not None, f"[{name}] install init container and host-files sidecar present")
    if not (init and side):
        return
    want = {f"/host{cfg['hooks_dir']}": (cfg["hooks_dir"], False),
            f"/host{cfg['criu_plugin_dir']}": (cfg["criu_plugin_dir"], False),
            f"/host{install_dir}": (install_dir, False),
            "/host/etc/criu": ("/etc/criu", False)}
    check(host_mounts(spec, init) == {**want, "/host": ("/", True)},
          f"[{name}] installer: the host's root read-only at /host, writes only hooks.d, the CRIU plugin dir, {install_dir}, /etc/criu: {host_mounts(spec, init)}")
    check(host_mounts(spec, side) == want, f"[{name}] host-files sidecar mounts the same writable directories, not the host root")
    env = {e["name"]: e.get("value") for e in init["env"]}
    check(env.get("GPUCKPT_VERIFY") == "true" and env.get("GPUCKPT_OTHER_GPU_PLUGINS") == "disable",
          f"[{name}] installer verifies on the host and moves CRIU's own GPU plugins aside: {env}")
    check(env.get("GPUCKPT_CRIU_CONFIG_DIR") == "/etc/criu" and env.get("GPUCKPT_CRIU_CONFIG_NAMES") == "runc.conf crun.conf",
          f"[{name}] installer ships runc.conf and crun.conf into /etc/criu")
    check(env.get("GPUCKPT_PLUGIN_SETTINGS_SRC", "").endswith("/gpuckpt_plugin.env"),
          f"[{name}] installer writes the plugin's settings file: {env}")
    settings = cm_data(objs).get("gpuckpt_plugin.env", "")
    check(settings.startswith("# gpuckpt: managed file\n") and
          [l for l in settings.splitlines() if not l.startswith("#")] == ["GPUCKPT_GPU_STORE=node"],
          f"[{name}] the plugin's settings file is marked gpuckpt's; by default it sets only the node's chunk store: {settings!r}")
    check(cfg.get("gpu_memory") == {"store": "node"},
          f"[{name}] the agent's config names the node's chunk store, as the plugin's settings do: {cfg.get('gpu_memory')}")
    conf = cm_data(objs).get("criu-runtime.conf", "")
    check(conf.startswith("# gpuckpt: managed file\n") and "\ntimeout 60\n" in conf,
          f"[{name}] the shipped CRIU config is marked gpuckpt's and raises CRIU's timeout to 60 s: {conf!r}")
    check(f"\nlibdir {cfg['criu_plugin_dir']}\n" in conf,
          f"[{name}] the shipped CRIU config points CRIU's libdir at the plugin dir ({cfg['criu_plugin_dir']}): {conf!r}")
    sc = init["securityContext"]
    check(sc.get("privileged") is True, f"[{name}] installer privileged by default (securityMode=privileged): {sc}")
    check(init["command"][-1] == "install", f"[{name}] init container runs install")
    check(side["lifecycle"]["preStop"]["exec"]["command"][-1] == "remove", f"[{name}] preStop runs remove")
    owner = [e for e in side["env"] if e["name"] == "GPUCKPT_OWNER"]
    check(owner and owner[0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid", f"[{name}] owner mark is the pod UID")
    check(hook["hook"]["path"] == f"{install_dir}/bin/gpuckpt-oci-hook", f"[{name}] hook path is the installed binary")


# ---- value sets ------------------------------------------------------------------------------------------------
ALL_OBJECTS = []


def case(name, sets=(), extra=(), lint_sets=()):
    print(f"case {name}: {' '.join(sets) or '(defaults)'}")
    proc = lint([*sets, *lint_sets])
    check(proc.returncode == 0, f"[{name}] helm lint --strict passes: {proc.stdout[-400:]}{proc.stderr[-400:]}")
    objs = render(sets, extra)
    ALL_OBJECTS.extend(objs)
    return objs


def test_defaults():
    objs = case("defaults")
    spec, cfg, cm, agent, tols, hook = common_checks(objs, "defaults")
    installer_checks(objs, "defaults", spec, cfg, hook)
    kinds = sorted(o["kind"] for o in objs)
    check(kinds == sorted(["ServiceAccount", "Secret", "ConfigMap", "Service", "DaemonSet", "NetworkPolicy", "ClusterRole",
                           "ClusterRoleBinding"]),
          f"[defaults] objects {kinds}")
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = [t["matchExpressions"][0]["key"] for t in terms]
    check(keys == ["nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-0300_10de.present",
                   "feature.node.kubernetes.io/pci-0302_10de.present", "feature.node.kubernetes.io/pci-0380_1002.present",
                   "feature.node.kubernetes.io/pci-0300_1002.present", "feature.node.kubernetes.io/pci-10de.present",
                   "feature.node.kubernetes.io/pci-1002.present"],
          f"[defaults] GPU node affinity OR-s the GPU operator's and stock NFD's NVIDIA and AMD labels: {keys}")
    check(one(objs, "DaemonSet")["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
          "[defaults] rolling update by surge: the new pod installs before the old one stops (the hook never disappears)")
    check(all(t["matchExpressions"][0]["values"] == ["true"] for t in terms), "[defaults] affinity matches label value true")
    check({"nvidia.com/gpu", "amd.com/gpu"} <= tols, f"[defaults] tolerates GPU taints: {tols}")
    check(rules(objs) == {("events", "create")},
          f"[defaults] RBAC: events create only (pod events): no nodes patch, no nodes/proxy, no pods: {rules(objs)}")
    check(spec["automountServiceAccountToken"] is True, "[defaults] service-account token mounted (events)")
    check(cfg["events"] == {"enabled": True}, f"[defaults] events on, limits left to the binary: {cfg.get('events')}")
    check(cfg["runtime"] == {"kind": "cri", "cri": {"endpoint": "unix:///run/crio/crio.sock"}},
          f"[defaults] runtime cri on CRI-O's socket only: {cfg['runtime']}")
    check("/run/crio" in host_mounts(spec, agent), "[defaults] the CRI socket's directory is mounted")
    feature_file = "/etc/kubernetes/node-feature-discovery/features.d/gpuckpt"
    check(cfg["node_labels"] == {"enabled": True, "method": "nfd_feature_file", "feature_file": feature_file},
          f"[defaults] node labels through an NFD feature file: {cfg['node_labels']}")
    check(host_mounts(spec, agent).get(os.path.dirname(feature_file)) == (os.path.dirname(feature_file), False),
          "[defaults] agent writes NFD's features.d (same path)")
    check("log_level" not in cfg and "log_format" not in cfg and "match_policy" not in cfg and "limits" not in cfg,
          "[defaults] null settings left to the binary")
    secret = one(objs, "Secret")
    import base64
    token = base64.b64decode(secret["data"]["token"]).decode()
    check(len(token) == 48 and token.isalnum(), "[defaults] generated 48-character token")
    check(secret["metadata"]["name"] == next(v for v in spec["volumes"] if v["name"] == "api-token")["secret"]["secretName"],
          "[defaults] pod mounts the generated Secret")
    svc = one(objs, "Service")
    check(svc["spec"]["selector"] == one(objs, "DaemonSet")["spec"]["selector"]["matchLabels"], "[defaults] Service selects the agent pods")
    check(svc["spec"]["ports"][0]["targetPort"] == "http", "[defaults] Service targets the http port")
    check(one(objs, "ServiceAccount").get("automountServiceAccountToken") is False, "[defaults] SA itself does not automount")


def test_network_policy():
    """The agent's port admits the agents of the release and networkPolicy.from alone: no other pod of
    the cluster reaches /v1 or /metrics; kubectl gpuckpt works from inside the agent's pod (loopback)."""
    objs = case("netpol-defaults")
    ds = one(objs, "DaemonSet")
    pol = one(objs, "NetworkPolicy")["spec"]
    check(pol["podSelector"]["matchLabels"] == ds["spec"]["selector"]["matchLabels"], "[netpol] selects the agent pods")
    check(pol["policyTypes"] == ["Ingress"], f"[netpol] governs ingress: {pol['policyTypes']}")
    check(len(pol["ingress"]) == 1, f"[netpol] one ingress rule: {pol['ingress']}")
    rule = pol["ingress"][0]
    check(rule["ports"] == [{"port": 7469, "protocol": "TCP"}], f"[netpol] only the agent's port: {rule['ports']}")
    check(rule["from"] == [{"podSelector": {"matchLabels": ds["spec"]["selector"]["matchLabels"]}}],
          f"[netpol] only this release's agents by default: {rule['from']}")
    prom = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    objs = case("netpol-from", ["agent.port=9000", "json:networkPolicy.from=" + json.dumps([prom])])
    rule = one(objs, "NetworkPolicy")["spec"]["ingress"][0]
    check(rule["ports"] == [{"port": 9000, "protocol": "TCP"}], f"[netpol-from] follows agent.port: {rule['ports']}")
    check(rule["from"][1:] == [prom], f"[netpol-from] admits the peers given: {rule['from']}")
    objs = case("netpol-off", ["networkPolicy.enabled=false"])
    check(not by_kind(objs, "NetworkPolicy"), "[netpol-off] no NetworkPolicy")
    notes = render_notes([])
    for what in ("cuda_plugin.so / amdgpu_plugin.so", "/etc/criu/runc.conf, /etc/criu/crun.conf", "gpuckpt-hook.json",
                 "features.d/gpuckpt", "root on the node", "A NetworkPolicy admits"):
        check(what in notes, f"[notes] what gpuckpt changes on a node names {what!r}")


def test_no_api():
    objs = case("no-api", ["nodeLabels.enabled=false", "events.enabled=false"])
    spec, cfg, *_ = common_checks(objs, "no-api")
    check(not by_kind(objs, "ClusterRole") and not by_kind(objs, "ClusterRoleBinding"), "[no-api] no RBAC at all when no feature needs the API")
    check(spec["automountServiceAccountToken"] is False, "[no-api] no service-account token in the pod")


def test_amd_only():
    objs = case("amd-only", ["json:gpuNodeAffinity.labels=[\"feature.node.kubernetes.io/pci-1002.present\"]",
                             "json:tolerations=[{\"key\":\"amd.com/gpu\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}]"])
    spec, cfg, cm, agent, tols, hook = common_checks(objs, "amd-only")
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    check([t["matchExpressions"][0]["key"] for t in terms] == ["feature.node.kubernetes.io/pci-1002.present"], "[amd-only] only AMD nodes")
    check(tols == {"amd.com/gpu"}, f"[amd-only] only the AMD taint tolerated: {tols}")


def test_labels_through_api():
    objs = case("labels-api", ["nodeLabels.method=api"])
    spec, cfg, cm, agent, *_ = common_checks(objs, "labels-api")
    check(rules(objs) == {("nodes", "get"), ("nodes", "patch"), ("events", "create")},
          f"[labels-api] RBAC: only nodes get/patch (and events create): {rules(objs)}")
    check(spec["automountServiceAccountToken"] is True, "[labels-api] SA token mounted (labels through the API)")
    check(cfg["node_labels"] == {"enabled": True, "method": "api"}, f"[labels-api] agent patches its node: {cfg['node_labels']}")
    check(not any(v["name"] == "host-nfd-features" for v in spec["volumes"]), "[labels-api] no NFD features.d mount")


def test_kubelet_proxy():
    objs = case("kubelet-proxy", ["runtime.kind=kubelet"])
    spec, cfg, *_ = common_checks(objs, "kubelet-proxy")
    check(rules(objs) == {("nodes/proxy", "get"), ("nodes/proxy", "create"), ("events", "create")},
          f"[kubelet-proxy] RBAC: nodes/proxy get/create (GET pods, POST checkpoint) only when asked for, nothing else: {rules(objs)}")
    k = cfg["runtime"]["kubelet"]
    check(k["url"] == "https://kubernetes.default.svc/api/v1/nodes/@NODE_NAME@/proxy", f"[kubelet-proxy] url through the API server: {k['url']}")
    check(k["ca_file"] == "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", "[kubelet-proxy] trusts the cluster CA")
    check(spec["automountServiceAccountToken"] is True, "[kubelet-proxy] SA token mounted")
    agent = container(spec, "agent")
    check("/run/crio" not in host_mounts(spec, agent) and "cri" not in cfg["runtime"],
          "[kubelet-proxy] no CRI socket mounted or configured when the kubelet does the checkpoint")


def test_kubelet_direct():
    objs = case("kubelet-direct", ["runtime.kind=kubelet", "runtime.kubelet.access=direct",
                                   "runtime.kubelet.caFile=/var/lib/kubelet/pki/kubelet.crt", "nodeLabels.enabled=false",
                                   "events.enabled=false"])
    spec, cfg, cm, agent, *_ = common_checks(objs, "kubelet-direct")
    check(rules(objs) == {("nodes/checkpoint", "create"), ("nodes/pods", "get")},
          f"[kubelet-direct] RBAC: only nodes/checkpoint create and nodes/pods get (no nodes/proxy): {rules(objs)}")
    k = cfg["runtime"]["kubelet"]
    check(k["url"] == "https://@NODE_IP@:10250", f"[kubelet-direct] url is the node's kubelet: {k['url']}")
    mounts = host_mounts(spec, agent)
    check(mounts.get(k["ca_file"]) == ("/var/lib/kubelet/pki/kubelet.crt", True), "[kubelet-direct] kubelet CA mounted read-only at ca_file")


def test_kubelet_direct_legacy():
    objs = case("kubelet-direct-legacy", ["runtime.kind=kubelet", "runtime.kubelet.access=direct", "nodeLabels.enabled=false",
                                          "events.enabled=false",
                                          "runtime.kubelet.caFile=/var/lib/kubelet/pki/kubelet.crt", "runtime.kubelet.legacyProxyAuthz=true"])
    common_checks(objs, "kubelet-direct-legacy")
    check(rules(objs) == {("nodes/checkpoint", "create"), ("nodes/proxy", "get")},
          f"[kubelet-direct-legacy] RBAC: nodes/checkpoint create, nodes/proxy get only (no create): {rules(objs)}")


def test_priority_quota():
    objs = case("priority-quota", ["priorityClassQuota.enabled=true"])
    spec, *_ = common_checks(objs, "priority-quota")
    quota = one(objs, "ResourceQuota")
    expr = quota.get("spec", {}).get("scopeSelector", {}).get("matchExpressions", [{}])[0]
    check(expr == {"scopeName": "PriorityClass", "operator": "In", "values": [spec["priorityClassName"]]},
          f"[priority-quota] the quota admits the pods' priority class: {expr}")
    check(not by_kind(case("no-quota", []), "ResourceQuota"), "[defaults] no ResourceQuota unless asked")


def test_monitoring():
    objs = case("monitoring", ["metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.interval=30s",
                               "metrics.serviceMonitor.labels.release=prom"],
                ["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"],
                lint_sets=["metrics.serviceMonitor.skipCrdCheck=true"])  # helm lint has no --api-versions
    common_checks(objs, "monitoring")
    sm = one(objs, "ServiceMonitor")
    svc = one(objs, "Service")
    check(all(svc["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items()),
          "[monitoring] ServiceMonitor selects the Service")
    ep = sm["spec"]["endpoints"][0]
    check(ep == {"port": "http", "path": "/metrics", "interval": "30s"}, f"[monitoring] scrapes http /metrics every 30s: {ep}")
    check(sm["metadata"]["labels"].get("release") == "prom", "[monitoring] carries the Prometheus selector label")


def test_existing_secret():
    objs = case("existing-secret", ["auth.existingSecret=my-token", "auth.secretKey=api-token"])
    spec, cfg, *_ = common_checks(objs, "existing-secret")
    check(not by_kind(objs, "Secret"), "[existing-secret] chart creates no Secret")
    vol = next(v for v in spec["volumes"] if v["name"] == "api-token")["secret"]
    check(vol["secretName"] == "my-token", "[existing-secret] pod mounts the named Secret")
    check(cfg["auth"]["token_file"].endswith("/api-token"), "[existing-secret] token_file uses auth.secretKey")


def test_registry_credentials_secret():
    objs = case("registry-secret", ["config.image_registry.repository=registry.example:5000/ml/ck",
                                    "imageRegistry.credentialsSecret=reg-creds", "imageRegistry.credentialsKey=login"])
    spec, cfg, *_ = common_checks(objs, "registry-secret")
    vol = next((v for v in spec["volumes"] if v["name"] == "registry-credentials"), {}).get("secret", {})
    check(vol.get("secretName") == "reg-creds" and vol.get("defaultMode") == 0o400 and
          vol.get("items") == [{"key": "login", "path": "login"}],
          f"[registry-secret] the Secret's key is mounted, owner-read only: {vol}")
    agent = container(spec, "agent")
    mount = [m for m in agent["volumeMounts"] if m["name"] == "registry-credentials"]
    check(mount and mount[0]["mountPath"] == "/etc/gpuckpt/registry" and mount[0].get("readOnly"),
          f"[registry-secret] mounted read-only into the agent: {mount}")
    check(cfg["image_registry"] == {"repository": "registry.example:5000/ml/ck", "credentials_file": "/etc/gpuckpt/registry/login"},
          f"[registry-secret] credentials_file points at the mounted key: {cfg.get('image_registry')}")
    plain = case("no-registry-secret", [])
    check(not [v for v in pod_spec(plain)["volumes"] if v["name"] == "registry-credentials"],
          "[no-registry-secret] no credentials volume without the Secret")


def test_full_config_shape():
    """Every chart setting given: the config has exactly the agent's keys (the shape of agent/config.example.yaml)."""
    sets = ["runtime.kind=kubelet", "runtime.callTimeoutSeconds=10", "runtime.containerdNamespace=ns",
            "runtime.podmanPath=/usr/bin/podman",
            "nodeLabels.intervalSeconds=60", "agent.logLevel=debug", "agent.logFormat=json",
            "events.queueLength=32", "events.timeoutSeconds=3",
            "config.checkpoints.watch_interval_seconds=2", "config.checkpoints.max_archive_bytes=1000000000",
            "config.checkpoints.max_entry_bytes=1000000000", "config.checkpoints.runtime_timeout_seconds=30",
            "config.limits.max_request_bytes=4096", "config.limits.max_concurrent_jobs=2",
            "config.limits.max_connections=64", "config.limits.max_connections_per_client=8",
            "config.limits.request_deadline_seconds=20", "config.limits.job_timeout_seconds=900",
            "config.limits.shutdown_grace_seconds=20",
            "config.limits.max_queued_jobs=32", "config.limits.max_queued_jobs_per_client=4",
            "config.limits.unreferenced_chunk_bytes=1099511627776", "config.limits.unreferenced_chunks=65536",
            "config.gpu_memory.image=false", "config.gpu_memory.threads=8", "config.gpu_memory.compression=zstd:3",
            "config.gpu_memory.sparse=false", "config.gpu_memory.store=/mnt/gpuckpt-store",
            "config.gpu_memory.huge_pages=false", "config.gpu_memory.map_chunks=true",
            "config.gpu_memory.recognise_unchanged=false", "config.gpu_memory.cpu_pages=false",
            "config.retention.keep_count=3", "config.retention.max_age_hours=168",
            "config.retention.max_bytes=107374182400", "config.retention.include_newest=true",
            "config.retention.interval_seconds=600", "config.retention.gc_grace_seconds=7200",
            'json:config.transfer.peer_networks=["10.244.0.0/16"]', "config.transfer.chunk_streams=6",
            "config.image_registry.repository=registry.example:5000/ml/checkpoints",
            "config.image_registry.credentials_file=/etc/gpuckpt/registry/credentials",
            "config.image_registry.plain_http=true", "config.image_registry.timeout_seconds=900",
            "config.image_registry.push_timeout_seconds=3600", "config.image_registry.token_realm_host=auth.registry.example",
            "config.image_registry.chunk_streams=12"]
    sets += [f"config.match_policy.{k}=false" for k in EXAMPLE["match_policy"]]
    objs = case("full-config", sets)
    spec, cfg, *_ = common_checks(objs, "full-config")
    # The API server's address, the credential paths and node_name stay the agent's defaults (in-cluster values).
    agent_owned = {"kubernetes_api.node_name", "kubernetes_api.server", "kubernetes_api.token_file",
                   "kubernetes_api.ca_file",
                   # the runtime's socket goes to the section of runtime.kind (test_containerd_runtime)
                   "runtime.cri.endpoint", "runtime.containerd.address"}
    missing = EXAMPLE_KEYS - leaf_paths(cfg) - agent_owned
    check(not missing, f"[full-config] every agent config key can be set from the chart; missing: {sorted(missing)}")
    check(cfg["match_policy"]["check_firmware"] is False, "[full-config] false survives (only null is dropped)")
    check(cfg["checkpoints"]["max_archive_bytes"] == 1000000000, "[full-config] large integers stay integers")
    check(cfg["limits"]["unreferenced_chunk_bytes"] == 1099511627776 and cfg["limits"]["unreferenced_chunks"] == 65536,
          f"[full-config] the unreferenced chunk quota reaches the agent's config: {cfg.get('limits')}")
    check(cfg["gpu_memory"] == {"image": False, "threads": 8, "compression": "zstd:3", "sparse": False,
                                "store": "/mnt/gpuckpt-store", "huge_pages": False, "map_chunks": True,
                                "recognise_unchanged": False, "cpu_pages": False},
          f"[full-config] gpu_memory reaches the agent's config: {cfg.get('gpu_memory')}")
    check(cfg["retention"] == {"keep_count": 3, "max_age_hours": 168, "max_bytes": 107374182400,
                               "include_newest": True, "interval_seconds": 600, "gc_grace_seconds": 7200},
          f"[full-config] retention reaches the agent's config: {cfg.get('retention')}")
    check(cfg["transfer"] == {"peer_networks": ["10.244.0.0/16"], "chunk_streams": 6},
          f"[full-config] transfer.peer_networks and chunk_streams reach the agent's config: {cfg.get('transfer')}")
    check(cfg["image_registry"] == {"repository": "registry.example:5000/ml/checkpoints", "plain_http": True,
                                    "credentials_file": "/etc/gpuckpt/registry/credentials", "timeout_seconds": 900,
                                    "push_timeout_seconds": 3600, "token_realm_host": "auth.registry.example",
                                    "chunk_streams": 12},
          f"[full-config] image_registry reaches the agent's config: {cfg.get('image_registry')}")
    settings = cm_data(objs).get("gpuckpt_plugin.env", "")
    check([l for l in settings.splitlines() if not l.startswith("#")] ==
          ["GPUCKPT_CUDA_MEMORY_IMAGE=0", "GPUCKPT_IMAGE_THREADS=8", "GPUCKPT_IMAGE_COMPRESSION=zstd:3", "GPUCKPT_IMAGE_SPARSE=0",
           "GPUCKPT_GPU_STORE=/mnt/gpuckpt-store", "GPUCKPT_STAGING_HUGE_PAGES=0", "GPUCKPT_STAGING_MAP_CHUNKS=1",
           "GPUCKPT_STORE_RECOGNISE_UNCHANGED=0", "GPUCKPT_CPU_PAGES_STORE=0"],
          f"[full-config] gpu_memory reaches the plugin's settings file the installer writes: {settings!r}")


def test_inline_store():
    objs = case("inline-store", ["config.gpu_memory.store=inline"])
    settings = cm_data(objs).get("gpuckpt_plugin.env", "")
    check([l for l in settings.splitlines() if not l.startswith("#")] == ["GPUCKPT_GPU_STORE=inline"],
          f"[inline-store] inline, for self-contained archives, reaches the plugin's settings file: {settings!r}")
    cfg, _ = agent_config(objs)
    check(cfg.get("gpu_memory") == {"store": "inline"}, f"[inline-store] and the agent's config: {cfg.get('gpu_memory')}")


def test_custom_paths():
    objs = case("custom-paths", ["host.hooksDir=/etc/containers/oci/hooks.d", "host.criuPluginDir=/opt/criu/lib",
                                 "host.kubeletCheckpointDir=", "host.installDir=/var/lib/gpuckpt-bin",
                                 "runtime.criSocket=/run/containerd/containerd.sock"])
    spec, cfg, cm, agent, tols, hook = common_checks(objs, "custom-paths")
    installer_checks(objs, "custom-paths", spec, cfg, hook, install_dir="/var/lib/gpuckpt-bin")
    check(cfg["hooks_dir"] == "/etc/containers/oci/hooks.d" and cfg["criu_plugin_dir"] == "/opt/criu/lib", "[custom-paths] config follows host paths")
    check(cfg["checkpoints"]["kubelet_dir"] == "", "[custom-paths] empty kubelet dir is passed on (agent: do not watch)")
    check("/var/lib/kubelet/checkpoints" not in host_mounts(spec, agent), "[custom-paths] kubelet dir not mounted")
    check(cfg["runtime"]["cri"] == {"endpoint": "unix:///run/containerd/containerd.sock"}, "[custom-paths] containerd socket")
    check("/run/containerd" in host_mounts(spec, agent), "[custom-paths] the socket's directory is mounted")


def test_containerd_runtime():
    objs = case("containerd", ["runtime.kind=containerd", "runtime.criSocket=/run/containerd/containerd.sock"])
    spec, cfg, cm, agent, *_ = common_checks(objs, "containerd")
    check(cfg["runtime"] == {"kind": "containerd", "containerd": {"address": "/run/containerd/containerd.sock"}},
          f"[containerd] the agent talks to containerd's socket: {cfg['runtime']}")
    mounts = host_mounts(spec, agent)
    check("/var/lib/containerd" in mounts and "/run/containerd" in mounts,
          f"[containerd] containerd's root (snapshots) and socket dir mounted: {mounts}")
    caps = agent["securityContext"]["capabilities"]
    check(caps["drop"] == ["ALL"] and set(caps["add"]) == {"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD"},
          f"[containerd] the agent gets exactly the file capabilities a rootfs diff needs: {caps}")


def test_nri():
    objs = case("nri", ["nri.enabled=true"])
    spec, cfg, cm, agent, *_ = common_checks(objs, "nri")
    nri = container(spec, "nri")
    check(nri is not None and nri["command"] == ["gpuckpt-nri"], "[nri] gpuckpt-nri runs in the pod")
    args = nri["args"]
    opt = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    check(opt.get("--socket") == "/var/run/nri/nri.sock" and opt.get("--state-dir") == cfg["state_dir"]
          and opt.get("--host-root") == "/host" and opt.get("--idx") == "50", f"[nri] args: {args}")
    check(opt.get("--hook") == "/opt/gpuckpt/bin/gpuckpt-oci-hook", f"[nri] restored containers get the installed hook: {args}")
    mounts = host_mounts(spec, nri)
    rw = {path for path, (_, ro) in mounts.items() if not ro}
    check(rw == {cfg["state_dir"], "/var/run/nri"}, f"[nri] writes only the state dir and the NRI socket dir: {sorted(rw)}")
    check(nri["securityContext"]["capabilities"]["drop"] == ["ALL"] and not nri["securityContext"].get("privileged"),
          "[nri] no capabilities, not privileged")
    # nri.enabled=auto (the default): on where the runtime has NRI on by default (runtime.kind cri: containerd >= 2.0,
    # CRI-O), off for containerd 1.7 (runtime.kind containerd: NRI off by default), kubelet and podman.
    for name, sets, want in (("nri-auto-cri", [], True),
                             ("nri-auto-containerd2", ["runtime.criSocket=/run/containerd/containerd.sock"], True),
                             ("nri-auto-containerd17", ["runtime.kind=containerd", "runtime.criSocket=/run/containerd/containerd.sock"], False),
                             ("nri-auto-podman", ["runtime.kind=podman"], False),
                             ("nri-off", ["nri.enabled=false"], False),
                             ("nri-on-containerd17", ["runtime.kind=containerd", "nri.enabled=true"], True)):
        got = container(pod_spec(case(name, sets)), "nri") is not None
        check(got == want, f"[{name}] gpuckpt-nri {'runs' if want else 'does not run'} ({' '.join(sets) or 'defaults'})")
    proc = helm("template", "t", CHART, "--set", "nri.enabled=maybe", expect_ok=False)
    check(proc.returncode != 0 and "true, false, \"auto\"" in proc.stderr, f"[nri] nri.enabled is true, false or auto: {proc.stderr[-300:]}")
    notes = render_notes(["runtime.kind=containerd"])
    check("gpuckpt-nri is off" in notes and "Enable NRI in containerd and set nri.enabled=true" in notes,
          f"[nri] NOTES say what to do where NRI is off on containerd: {notes[:600]}")
    check("one\nrelease per pool" in notes or "one release per pool" in notes.replace("\n", " "), "[nri] NOTES point mixed pools to one release per pool")


def test_termination_grace():
    """The pod's grace covers an in-flight job: at SIGTERM the agent gives its jobs limits.shutdown_grace_seconds,
    then lets a runtime call in flight finish (bounded by the runtime timeout)."""
    for name, sets, want in (("grace-default", [], 660),
                             ("grace-follows-timeout", ["config.checkpoints.runtime_timeout_seconds=100"], 160),
                             ("grace-follows-shutdown-grace", ["config.limits.shutdown_grace_seconds=100"], 730),
                             ("grace-no-shutdown-grace", ["config.limits.shutdown_grace_seconds=0"], 630),
                             ("grace-given", ["terminationGracePeriodSeconds=900"], 900)):
        objs = case(name, sets)
        got = pod_spec(objs)["terminationGracePeriodSeconds"]
        check(got == want, f"[{name}] terminationGracePeriodSeconds {want} (got {got})")
        if name == "grace-follows-shutdown-grace":
            limits = agent_config(objs)[0].get("limits", {})
            check(limits.get("shutdown_grace_seconds") == 100,
                  f"[{name}] the agent's config has limits.shutdown_grace_seconds 100 (got {limits})")


def render_notes(sets):
    """NOTES.txt as `helm install` prints it (helm template does not render NOTES): a copy of the chart renders it
    into a ConfigMap through tpl."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = os.path.join(tmp, "gpuckpt")
        subprocess.run(["cp", "-r", CHART, chart], check=True)
        os.rename(os.path.join(chart, "templates", "NOTES.txt"), os.path.join(chart, "notes.txt"))
        with open(os.path.join(chart, "templates", "notes-rendered.yaml"), "w") as f:
            f.write('apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n')
        args = ["template", "t", chart, "--namespace", NS, "--show-only", "templates/notes-rendered.yaml"]
        for s in sets:
            args += ["--set", s]
        return yaml.safe_load(helm(*args).stdout)["data"]["notes"]


def test_mixed_pools():
    """A cluster with a containerd 2.x pool and a CRI-O pool: one release per pool (one criSocket each), each
    pinned to its pool by nodeSelector; the two releases' objects do not collide."""
    pools = {"gpuckpt-ctrd": ("/run/containerd/containerd.sock", "containerd"),
             "gpuckpt-crio": ("/run/crio/crio.sock", "crio")}
    rendered = {}
    for release, (socket, pool) in pools.items():
        args = ["template", release, CHART, "--namespace", NS, "--set", f"runtime.criSocket={socket}",
                "--set", f"nodeSelector.gpuckpt\\.io/runtime-pool={pool}"]
        objs = [d for d in yaml.safe_load_all(helm(*args).stdout) if d]
        ALL_OBJECTS.extend(objs)
        rendered[release] = objs
        spec, (cfg, _) = pod_spec(objs), agent_config(objs)
        check(spec.get("nodeSelector") == {"gpuckpt.io/runtime-pool": pool}, f"[{release}] pinned to its pool: {spec.get('nodeSelector')}")
        check(cfg["runtime"]["kind"] == "cri" and socket in json.dumps(cfg["runtime"]), f"[{release}] its own socket: {cfg['runtime']}")
        check(container(spec, "nri") is not None, f"[{release}] gpuckpt-nri runs (auto, runtime.kind cri)")
        labels = one(objs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
        check(labels.get("app.kubernetes.io/name") == "gpuckpt" and labels.get("app.kubernetes.io/component") == "agent",
              f"[{release}] kubectl gpuckpt's default agent selector finds its pods: {labels}")
    names = [{(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs} for objs in rendered.values()]
    check(not names[0] & names[1], f"[mixed pools] the two releases share no object name: {sorted(names[0] & names[1])}")


def test_installer_off():
    objs = case("installer-off", ["installer.enabled=false", "installer.removeOnStop=false"])
    spec, *_ = common_checks(objs, "installer-off")
    check(container(spec, "install-host-files", init=True) is None and container(spec, "host-files") is None,
          "[installer-off] no installer containers")
    check(not any(v["name"] == "host-install-dir" for v in spec["volumes"]), "[installer-off] install dir not mounted")


def test_events_and_log_format():
    """Pod events (create on events, nothing more) and the log format reach the agent's config and gpuckpt-nri."""
    objs = case("events-off", ["events.enabled=false"])
    spec, cfg, *_ = common_checks(objs, "events-off")
    check(cfg["events"] == {"enabled": False}, f"[events-off] the agent posts no events: {cfg['events']}")
    check(rules(objs) == set() and spec["automountServiceAccountToken"] is False,
          f"[events-off] no RBAC and no token left with the default NFD labels: {rules(objs)}")
    objs = case("log-format", ["agent.logFormat=logfmt", "events.queueLength=8", "events.timeoutSeconds=2"])
    spec, cfg, *_ = common_checks(objs, "log-format")
    check(cfg["log_format"] == "logfmt", f"[log-format] agent config log_format: {cfg.get('log_format')}")
    check(cfg["events"] == {"enabled": True, "queue_length": 8, "timeout_seconds": 2}, f"[log-format] events: {cfg['events']}")
    args = container(spec, "nri")["args"]
    check(args[args.index("--log-format") + 1] == "logfmt", f"[log-format] gpuckpt-nri logs the same way: {args}")
    spec, *_ = common_checks(case("log-format-default"), "log-format-default")
    check("--log-format" not in container(spec, "nri")["args"], "[log-format-default] nri keeps its default")


def test_byo_service_account():
    objs = case("byo-sa", ["rbac.create=false", "serviceAccount.create=false", "serviceAccount.name=gpu-agent"])
    spec, *_ = common_checks(objs, "byo-sa")
    check(spec["serviceAccountName"] == "gpu-agent", "[byo-sa] pod uses the named ServiceAccount")
    check(not by_kind(objs, "ClusterRole") and not by_kind(objs, "ServiceAccount"), "[byo-sa] chart creates no SA or RBAC")


def test_all_nodes():
    objs = case("all-nodes", ["gpuNodeAffinity.enabled=false", "allNodes=true"])
    spec, *_ = common_checks(objs, "all-nodes")
    check("affinity" not in spec and "nodeSelector" not in spec, "[all-nodes] no node restriction")


def test_node_selector_instead_of_affinity():
    objs = case("node-selector", ["gpuNodeAffinity.enabled=false", "json:nodeSelector={\"gpu\":\"true\"}"])
    spec, *_ = common_checks(objs, "node-selector")
    check(spec.get("nodeSelector") == {"gpu": "true"} and "affinity" not in spec, "[node-selector] nodeSelector replaces the affinity")


BAD = [
    ("grace-shorter-than-runtime-timeout", ["terminationGracePeriodSeconds=30"],
     "terminationGracePeriodSeconds=30 is shorter than the agent's runtime timeout (config.checkpoints.runtime_timeout_seconds=600)"),
    ("grace-shorter-than-timeout-and-shutdown-grace", ["terminationGracePeriodSeconds=620"],
     "terminationGracePeriodSeconds=620 is shorter than the agent's runtime timeout (config.checkpoints.runtime_timeout_seconds=600) plus its shutdown grace (config.limits.shutdown_grace_seconds=30)"),
    ("servicemonitor-without-crd", ["metrics.serviceMonitor.enabled=true"],
     "no monitoring.coreos.com/v1 ServiceMonitor CRD. Install prometheus-operator's CRDs first, or with `helm template` pass --api-versions"),
    ("servicemonitor-without-service", ["metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.skipCrdCheck=true", "service.enabled=false"],
     "needs the Service it scrapes: set service.enabled=true"),
    ("kubelet-without-rbac", ["runtime.kind=kubelet", "rbac.create=false", "nodeLabels.enabled=false"],
     "rbac.create=false and no serviceAccount.name is given"),
    ("labels-without-rbac", ["rbac.create=false", "nodeLabels.method=api"], "Set rbac.create=true, or name a ServiceAccount you have bound yourself"),
    ("no-node-restriction", ["gpuNodeAffinity.enabled=false"],
     "would run the agent on every node, GPU or not. Select GPU nodes with nodeSelector"),
    ("no-affinity-labels", ["json:gpuNodeAffinity.labels=[]"], "selects no node"),
    ("secret-and-token", ["auth.existingSecret=x", "auth.token=y"], "auth.existingSecret and auth.token are both set"),
    ("kubelet-direct-without-ca", ["runtime.kind=kubelet", "runtime.kubelet.access=direct"], "needs runtime.kubelet.caFile"),
    ("kubelet-without-checkpoint-dir", ["runtime.kind=kubelet", "host.kubeletCheckpointDir="], "host.kubeletCheckpointDir is empty"),
    ("cri-without-socket", ["runtime.criSocket="], "runtime.kind=cri needs runtime.criSocket"),
    ("containerd-without-root", ["runtime.kind=containerd", "runtime.containerdRoot="], "needs runtime.containerdRoot"),
    ("schema-runtime-kind", ["runtime.kind=docker"], "runtime.kind must be one of the following"),
    ("schema-relative-path", ["host.stateDir=var/lib/gpuckpt"], "host.stateDir: Does not match pattern"),
    ("schema-unknown-config-key", ["config.limits.max_requests=1"], "Additional property max_requests is not allowed"),
    ("schema-log-level", ["agent.logLevel=verbose"], "agent.logLevel"),
    ("schema-log-format", ["agent.logFormat=yaml"], "agent.logFormat"),
    ("schema-events-queue", ["events.queueLength=0"], "events.queueLength"),
    ("schema-gpu-memory-map-chunks", ["config.gpu_memory.map_chunks=sometimes"], "config.gpu_memory.map_chunks"),
    ("schema-gpu-memory-recognise-unchanged", ["config.gpu_memory.recognise_unchanged=1"],
     "config.gpu_memory.recognise_unchanged"),
    ("schema-gpu-memory-cpu-pages", ["config.gpu_memory.cpu_pages=1"], "config.gpu_memory.cpu_pages"),
    ("events-without-rbac", ["rbac.create=false"], "or set events.enabled=false"),
    ("registry-secret-without-repository", ["imageRegistry.credentialsSecret=reg"],
     "imageRegistry.credentialsSecret is set but config.image_registry.repository is not"),
    ("registry-secret-and-file", ["imageRegistry.credentialsSecret=reg", "config.image_registry.repository=r.example/x",
                                  "config.image_registry.credentials_file=/x"], "Unset config.image_registry.credentials_file"),
    ("quota-without-priority", ["priorityClassQuota.enabled=true", "priorityClassName="], "the quota admits pods of a priority class"),
]


def selects(spec, node_labels):
    """Whether the pod's required node affinity admits a node with these labels (matchExpressions In, OR-ed terms)."""
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return any(all(e["operator"] == "In" and node_labels.get(e["key"]) in e["values"] for e in t["matchExpressions"])
               for t in terms)


def test_gpu_node_label_sets():
    """The default affinity lands on GPU nodes as stock NFD and the NVIDIA GPU operator label them, not elsewhere."""
    objs = case("label-sets")
    spec = pod_spec(objs)
    nodes = {
        "stock NFD, NVIDIA H100 (3D controller)": {"feature.node.kubernetes.io/pci-0302_10de.present": "true",
                                                    "feature.node.kubernetes.io/pci-0200_15b3.present": "true"},
        "stock NFD, NVIDIA workstation (VGA)": {"feature.node.kubernetes.io/pci-0300_10de.present": "true"},
        "stock NFD, AMD Instinct (display controller)": {"feature.node.kubernetes.io/pci-0380_1002.present": "true"},
        "NVIDIA GPU operator": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "NFD with deviceLabelFields [vendor]": {"feature.node.kubernetes.io/pci-10de.present": "true"},
    }
    for what, labels in nodes.items():
        check(selects(spec, labels), f"[label-sets] schedules on a GPU node labelled by {what}")
    cpu_nodes = {"stock NFD CPU node (VGA from another vendor, NIC)": {"feature.node.kubernetes.io/pci-0300_1a03.present": "true",
                                                                      "feature.node.kubernetes.io/pci-0200_8086.present": "true"},
                 "GPU operator, GPU absent": {"nvidia.com/gpu.present": "false"}}
    for what, labels in cpu_nodes.items():
        check(not selects(spec, labels), f"[label-sets] does not schedule on a {what}")


def test_security_modes():
    objs = case("spc-t", ["securityMode=spcT"])
    spec, cfg, cm, agent, tols, hook = common_checks(objs, "spc-t")
    init = container(spec, "install-host-files", init=True)
    sc = init["securityContext"]
    check(not sc.get("privileged") and sc.get("seLinuxOptions") == {"type": "spc_t"} and sc.get("allowPrivilegeEscalation") is False,
          f"[spc-t] installer unprivileged, SELinux spc_t: {sc}")
    check(sc.get("capabilities") == {"drop": ["ALL"], "add": ["SYS_ADMIN", "SYS_CHROOT"]},
          f"[spc-t] installer gets only SYS_ADMIN and SYS_CHROOT (chroot, CRIU's probe): {sc.get('capabilities')}")
    objs = case("spc-t-no-verify", ["securityMode=spcT", "installer.verify=false", "criuConfig.enabled=false"])
    spec, *_ = common_checks(objs, "spc-t-no-verify")
    init = container(spec, "install-host-files", init=True)
    sc = init["securityContext"]
    check(sc.get("capabilities") == {"drop": ["ALL"]}, f"[spc-t-no-verify] no capability without verification: {sc}")
    check(host_mounts(spec, init).get("/host") == ("/", True) and "/host/etc/criu" not in host_mounts(spec, init),
          f"[spc-t-no-verify] the host root read-only (the installer reads which runtimes run there), no CRIU config dir: {host_mounts(spec, init)}")
    env = {e["name"]: e.get("value") for e in init["env"]}
    check(env.get("GPUCKPT_VERIFY") == "false" and "GPUCKPT_CRIU_CONFIG_DIR" not in env and
          "criu-runtime.conf" not in cm_data(objs), f"[spc-t-no-verify] installer told not to verify, no CRIU config: {env}")
    objs = case("criu-options", ["criuConfig.timeoutSeconds=300", "json:criuConfig.extraOptions=[\"tcp-established\"]",
                                 "installer.otherGpuPlugins=refuse", "installer.criuPath=/usr/local/sbin/criu"])
    spec = pod_spec(objs)
    conf = cm_data(objs)["criu-runtime.conf"]
    check("\ntimeout 300\n" in conf and "\ntcp-established" in conf, f"[criu-options] timeout and extra options rendered: {conf!r}")
    env = {e["name"]: e.get("value") for e in container(spec, "install-host-files", init=True)["env"]}
    check(env.get("GPUCKPT_OTHER_GPU_PLUGINS") == "refuse" and env.get("GPUCKPT_CRIU") == "/usr/local/sbin/criu",
          f"[criu-options] conflict policy and CRIU path passed on: {env}")


def test_bad_combinations():
    for name, sets, text in BAD:
        args = ["template", "t", CHART, "--namespace", NS]
        for s in sets:
            args += ["--set-json" if s.startswith("json:") else "--set", s.removeprefix("json:")]
        proc = helm(*args, expect_ok=False)
        check(proc.returncode != 0, f"[bad:{name}] helm template fails")
        check(text in proc.stderr, f"[bad:{name}] error names the fix ({text!r}); got: {proc.stderr.strip()[-300:]}")
        print(f"case bad:{name}: {'fails as expected' if proc.returncode and text in proc.stderr else 'WRONG'}")


def test_token_kept_on_upgrade_template():
    """The Secret template reuses an existing token (lookup); helm template has no cluster, so this checks the
    explicit-token path and that two renders without one differ (generated, not a constant)."""
    a = one(render([]), "Secret")["data"]["token"]
    b = one(render([]), "Secret")["data"]["token"]
    check(a != b, "generated tokens are random, not a constant")
    c = one(render(["auth.token=s3cr3t"]), "Secret")["data"]["token"]
    import base64
    check(base64.b64decode(c).decode() == "s3cr3t", "auth.token is used as given")
    secret_tpl = open(os.path.join(CHART, "templates", "secret.yaml")).read()
    check('lookup "v1" "Secret"' in secret_tpl, "Secret template looks up the existing token to keep it on upgrade")


def test_notes_name_doctor():
    notes = open(os.path.join(CHART, "templates", "NOTES.txt")).read()
    check("gpuckpt doctor" in notes and "/v1/node" in notes, "NOTES tell the operator to run gpuckpt doctor (and /v1/node)")


def test_docs_name_real_values():
    """Every chart value the operator docs name (`host.hooksDir`, `--set runtime.kind=...`) exists in values.yaml
    (dotted names that are agent config keys, like auth.token_file in quoted agent messages, are the agent's)."""
    values = yaml.safe_load(open(os.path.join(CHART, "values.yaml")))
    free_maps = {"nodeSelector", "affinity", "podLabels", "podAnnotations", "commonLabels", "metrics.serviceMonitor.labels",
                 "service.annotations", "serviceAccount.annotations"}
    import re
    # (not inside a longer dotted name: `io.containerd.nri.v1.nri` is containerd's, not the value nri.v1)
    pattern = re.compile(r"(?<![\w.])((?:" + "|".join(map(re.escape, values)) + r")(?:\.[A-Za-z_*][A-Za-z0-9_*]*)+)")
    for doc in ["docs/deploy.md", "docs/troubleshooting.md", "docs/kubernetes.md", "charts/gpuckpt/README.md", "manifests/README.md"]:
        text = open(os.path.join(SRC, doc)).read()
        for ref in sorted(set(pattern.findall(text))):
            if ref.endswith((".yaml", ".json", ".md", ".dump", ".toml", ".sh", ".sock")) or ref in EXAMPLE_KEYS:
                continue   # a file name, or an agent config key (quoted from the agent's messages)
            node, ok = values, True
            parts = ref.split(".")
            for i, part in enumerate(parts):
                if ".".join(parts[:i]) in free_maps:
                    break
                if part == "*" or part.endswith("*"):
                    ok = isinstance(node, dict) and any(k.startswith(part.rstrip("*")) for k in node)
                    break
                if not isinstance(node, dict) or part not in node:
                    ok = False
                    break
                node = node[part]
            check(ok, f"[docs] {doc} names the value '{ref}', which values.yaml does not have")


def main():
    dump = None
    if "--dump-objects" in sys.argv:
        dump = sys.argv[sys.argv.index("--dump-objects") + 1]
    print(f"agent config check: {AGENT if os.access(AGENT, os.X_OK) else 'skipped, ' + AGENT + ' not built'}")
    for t in [test_defaults, test_network_policy, test_labels_through_api, test_no_api, test_amd_only, test_kubelet_proxy, test_kubelet_direct, test_kubelet_direct_legacy, test_priority_quota, test_monitoring,
              test_existing_secret, test_registry_credentials_secret, test_full_config_shape, test_inline_store, test_custom_paths, test_containerd_runtime, test_nri, test_mixed_pools, test_termination_grace, test_installer_off,
              test_byo_service_account, test_all_nodes, test_node_selector_instead_of_affinity,
              test_gpu_node_label_sets, test_security_modes,
              test_bad_combinations, test_token_kept_on_upgrade_template, test_notes_name_doctor, test_docs_name_real_values]:
        t()
    if dump:
        with open(dump, "w") as f:
            json.dump(ALL_OBJECTS, f)
    print(f"{CHECKS - len(FAILURES)} passed, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
