// `gpuckpt VERB --help`: every verb's flags with their defaults, and an example. One table, so that the help of all
// verbs reads alike and test/cli/cli_help_test.sh can hold each verb's help against the flags its usage names.
#include "cli/verb_help.h"

#include <cstdio>

#include "node/runtime_kinds.h"

namespace gpuckpt::cli {

namespace {

constexpr const char* kAgentFlags =
    "  --agent URL           the node's gpuckpt agent (default: $GPUCKPT_AGENT)\n"
    "  --token-file FILE     the agent's API token (default: $GPUCKPT_TOKEN_FILE)\n";

constexpr const char* kTargetFlags =
    "  --agent URL           the node's gpuckpt agent (default: $GPUCKPT_AGENT; neither: the local runtime, podman,\n"
    "                        on this host, which the verb says on stderr)\n"
    "  --token-file FILE     the agent's API token (default: $GPUCKPT_TOKEN_FILE)\n"
    "  --timeout SECONDS     stop following the job after this long; it goes on at the agent (default: follow it\n"
    "                        to its end, which the agent bounds by limits.job_timeout_seconds, 7200)\n"
    "  --quiet, -q           no progress lines\n"
    " local runtime only:\n"
    "  --state-dir DIR       the hook's records and restore plans (default /var/lib/gpuckpt)\n"
    "  --checkpoint-dir DIR  where archives are written and read (default /var/lib/gpuckpt/checkpoints)\n"
    "  --hooks-dir DIR       hooks.d passed to podman (default: podman's own)\n"
    "  --host-root DIR       where the host's /sys, /proc, /dev are (default /)\n";

constexpr const char* kHostFlags =
    "  --host-root DIR       where the node's /sys, /proc, /dev are (default /; NVML is read only with /)\n"
    "  --nvml-snapshot FILE  replay a recorded NVML snapshot instead of the driver library (default: none)\n";

// `gpuckpt runtime --help`: the runtime kinds an agent may have and what a restore is on each (node/runtime_kinds.h).
void print_runtime_kinds() {
  std::printf("\nruntime kinds (the agent's runtime.kind) and what a restore there is:\n");
  for (const auto& kind : node::kRuntimeKinds)
    std::printf("  %-12.*s %-10.*s %.*s\n", static_cast<int>(kind.name.size()), kind.name.data(),
                static_cast<int>(node::to_string(kind.restores).size()), node::to_string(kind.restores).data(),
                static_cast<int>(kind.runtimes.size()), kind.runtimes.data());
  std::printf("  container: the agent restores the container itself (POST /v1/restores);\n"
              "  pod: kubelet creates it in a pod whose image is a checkpoint image (POST /v1/images)\n");
}

struct Help {
  const char* verb;
  const char* usage;
  const char* flags;
  const char* shared;   // kAgentFlags, kTargetFlags, kHostFlags or nullptr
  const char* example;
  bool wide = false;    // -o wide shows more columns
  bool output_file = false;   // -o/--output names the file the verb writes (tar's and cc's sense), not a format
  void (*more)() = nullptr;   // prints what else a verb's help says, after its flags
};

constexpr Help kHelp[] = {
    {"version", "gpuckpt version | gpuckpt --version",
     "  --version, -V         (as gpuckpt's first argument) the same as the verb\n", nullptr, "gpuckpt --version"},
    {"gpus", "gpuckpt gpus [--host-root DIR] [--nvml-snapshot FILE] [--json]",
     "  --json                the GPU properties record (docs/formats.md) instead of a table\n", kHostFlags,
     "gpuckpt gpus -o yaml", true},
    {"match",
     "gpuckpt match --source FILE|- [--target-gpus ID,ID...] [--host-root DIR] [--nvml-snapshot FILE] [--json]\n"
     "       gpuckpt match --source FILE|- --agent URL --token-file FILE [--json]",
     "  --source FILE|-       a GPU properties record (JSON or protobuf; - reads stdin) (required)\n"
     "  --target-gpus ID,ID   only these GPUs of this node may be used, as restore --target-gpus (default: any;\n"
     "                        --assigned: the old spelling, deprecated)\n"
     "  --agent URL           let that node's agent judge (POST /v1/match: its NVML view and match_policy);\n"
     "                        not with --host-root/--nvml-snapshot/--target-gpus (default: judge here)\n"
     "  --token-file FILE     the agent's API token (default: $GPUCKPT_TOKEN_FILE)\n"
     "  --json                the mapping or the rejections as JSON\n",
     kHostFlags, "gpuckpt match --source node-a.json --host-root /host   # exit 3: no GPU of this node fits"},
    {"checkpoint", "gpuckpt checkpoint CONTAINER [--namespace NS] [--pod POD] [--tag TAG] [target flags] [--json]",
     "  CONTAINER             the container's name (with --pod: its name in the pod)\n"
     "  --namespace NS        the pod's namespace (default: none)\n"
     "  --pod POD             the pod the container is in (default: none, a bare container)\n"
     "  --tag TAG             also write the archive as an OCI checkpoint image tagged TAG, as image --tag\n"
     "                        (default: no image; --image: the old spelling, deprecated)\n"
     "  --json                the finished job as JSON\n",
     kTargetFlags,
     "gpuckpt checkpoint main --namespace ml --pod train --agent http://127.0.0.1:7469 --token-file "
     "/etc/gpuckpt/auth/token"},
    {"restore", "gpuckpt restore ARCHIVE [--name NAME] [--target-gpus ID,ID] [target flags] [--json]",
     "  ARCHIVE               an archive in the agent's checkpoint directory\n"
     "  --name NAME           the restored container's name (default: the runtime's choice)\n"
     "  --target-gpus ID,ID   restore onto these GPUs (default: the matcher chooses)\n"
     "  --json                the finished job as JSON\n",
     kTargetFlags, "gpuckpt restore /var/lib/gpuckpt/checkpoints/ck-20261122T001228Z-61ef843a.tar.zst --name train-2"},
    {"inspect",
     "gpuckpt inspect ARCHIVE|GPU-MEMORY-IMAGE|IMAGE-DIR [--timeout SECONDS] [--host-root DIR] [--nvml-snapshot FILE] "
     "[--json]",
     "  ARCHIVE               a checkpoint archive (.tar, .tar.zst, .tar.gz), a GPU memory image\n"
     "                        (gpuckpt-gpumem-PID.img) or a CRIU image directory; anything else: exit 2\n"
     "  --timeout SECONDS     stop reading the archive after this long, exit 2 (default 600)\n"
     "  --json                what it holds and this node's verdict as JSON\n",
     kHostFlags, "gpuckpt inspect ck-20261122T001228Z-61ef843a.tar.zst   # exit 3: this node cannot take it"},
    {"store", "gpuckpt store gc|refs|unref CHECKPOINT [--store DIR] [--grace SECONDS] [--delete] [--json]",
     "  gc                    chunks no kept checkpoint references: listed with their bytes (a dry run); exit 1\n"
     "                        when a reference names a chunk the store lacks\n"
     "  refs                  the references (one per process of a kept checkpoint) and the bytes each holds alone\n"
     "  unref CHECKPOINT      drop checkpoint CHECKPOINT's references (its archive is deleted); gc then frees them\n"
     "  --store DIR           the chunk store (default: $GPUCKPT_GPU_STORE when a path, else /var/lib/gpuckpt/chunks)\n"
     "  --grace SECONDS       keep unreferenced chunks written or reused this recently (default 3600, at least 60)\n"
     "  --delete              remove the garbage (default: only list it)\n"
     "  --json                the report as JSON\n",
     nullptr, "gpuckpt store gc --delete --store /mnt/gpuckpt-chunks"},
    {"export", "gpuckpt export ARCHIVE -o OUT [--store DIR] [--timeout SECONDS] [--json]",
     "  ARCHIVE               a store-backed checkpoint archive (podman export, kubelet's, the agent's): its GPU\n"
     "                        memory manifests name chunks in the chunk store\n"
     "  -o, --output OUT      the self-contained archive written: ARCHIVE plus every chunk it needs, checked against\n"
     "                        its digest (required; the input's compression; nothing is left there on failure)\n"
     "  --store DIR           the chunk store holding the chunks (default: $GPUCKPT_GPU_STORE when a path, else\n"
     "                        /var/lib/gpuckpt/chunks)\n"
     "  --timeout SECONDS     stop after this long, exit 2, nothing written (default 3600)\n"
     "  --json                what was carried as JSON\n",
     nullptr, "gpuckpt export ck-20261122T001228Z-61ef843a.tar.zst -o moved.tar.zst   # then: gpuckpt import moved.tar.zst",
     false, true},
    {"import", "gpuckpt import ARCHIVE [-o OUT] [--store DIR] [--timeout SECONDS] [--json]",
     "  ARCHIVE               an archive `gpuckpt export` wrote: its chunks go into the chunk store (each checked\n"
     "                        against its digest first; those the store has already are skipped), with a reference\n"
     "                        per process so `gpuckpt store gc` keeps them until `gpuckpt store unref`\n"
     "  -o, --output OUT      the store-backed archive written for the runtime to restore (default: ARCHIVE itself,\n"
     "                        replaced once the chunks and references are in the store)\n"
     "  --store DIR           the chunk store, made when absent (default: $GPUCKPT_GPU_STORE when a path, else\n"
     "                        /var/lib/gpuckpt/chunks)\n"
     "  --timeout SECONDS     stop after this long, exit 2, the archive not written (default 3600)\n"
     "  --json                what was imported as JSON\n",
     nullptr, "gpuckpt import moved.tar.zst -o /var/lib/gpuckpt/checkpoints/moved.tar.zst", false, true},
    {"pull-chunks",
     "gpuckpt pull-chunks IMAGE [--store DIR] [--plain-http] [--credentials-file FILE] [--streams N] "
     "[--timeout SECONDS] [--agent URL --token-file FILE] [--json]",
     "  IMAGE                 HOST[:PORT]/PATH:TAG, a store-backed checkpoint image an agent pushed with its chunks\n"
     "                        (the registry holds them under TAG.gpuckpt-chunks); only the chunks the store lacks\n"
     "                        are downloaded, each checked against its digests before it enters the store\n"
     "  --store DIR           the chunk store, made when absent (default: $GPUCKPT_GPU_STORE when a path, else\n"
     "                        /var/lib/gpuckpt/chunks); with --agent: the agent's gpu_memory.store\n"
     "  --plain-http          http:// (a registry without TLS; default https://); with --agent: its image_registry\n"
     "  --credentials-file FILE  USER:PASSWORD, sent only when the registry asks (default: anonymous)\n"
     "  --streams N           chunks downloaded at a time, 1-32 (default 4)\n"
     "  --timeout SECONDS     the whole pull (default 3600); with --agent: stop following the job after this long\n"
     "  --json                the report (with --agent: the finished job) as JSON\n",
     kAgentFlags, "gpuckpt pull-chunks registry.example:5000/ml/checkpoints:ck-1   # then restore from that image",
     false, false},
    {"image", "gpuckpt image ARCHIVE [--tag TAG] [target flags] [--json]",
     "  ARCHIVE               an archive in the agent's checkpoint directory\n"
     "  --tag TAG             the image's tag (default: the archive's name without .tar*)\n"
     "  --json                the finished job as JSON\n",
     kTargetFlags, "gpuckpt image /var/lib/gpuckpt/checkpoints/moved.tar.zst --agent http://127.0.0.1:7469"},
    {"transfer", "gpuckpt transfer ARCHIVE --to URL --agent URL --token-file FILE [--timeout SECONDS] [--json]",
     "  ARCHIVE               an archive in the sending agent's checkpoint directory\n"
     "  --to URL              the receiving agent, http://A.B.C.D:PORT (inside the sender's transfer.peer_networks)\n"
     "  --timeout SECONDS     stop following the job after this long; it goes on at the agent (default: follow it\n"
     "                        until it ends)\n"
     "  --json                the finished job as JSON\n",
     kAgentFlags,
     "gpuckpt transfer /var/lib/gpuckpt/checkpoints/ck-20261122T001228Z-61ef843a.tar.zst --to http://10.1.2.3:7469 "
     "--agent http://127.0.0.1:7469 --token-file /etc/gpuckpt/auth/token"},
    {"runtime", "gpuckpt runtime --agent URL --token-file FILE [--json]",
     "  --json                GET /v1/runtime as it is (default: KIND NAME VERSION RESTORES on one line)\n", kAgentFlags,
     "gpuckpt runtime --agent http://127.0.0.1:7469 --token-file /etc/gpuckpt/auth/token", false, false,
     print_runtime_kinds},
    {"target-pod",
     "gpuckpt target-pod --node NODE --container NAME --image REF [--name NAME] [--pull Never|IfNotPresent] "
     "[--owner-selector JSON | --no-labels] < POD_JSON",
     "  --node NODE           the node the new pod runs on (required)\n"
     "  --container NAME      the container restored from the checkpoint image (required)\n"
     "  --image REF           the checkpoint image (required)\n"
     "  --name NAME           the new pod's name (default: SOURCE-migrated)\n"
     "  --pull POLICY         the container's imagePullPolicy (default Never)\n"
     "  --owner-selector JSON the .spec.selector of the source's owner: the labels it selects by are not copied\n"
     "                        (it would adopt the copy and delete one of the two)\n"
     "  --no-labels           copy no labels (an owner whose selector is unknown)\n",
     nullptr, "kubectl get pod train -o json | gpuckpt target-pod --node gpu-b --container main --image IMAGE"},
    {"jobs",
     "gpuckpt jobs [--kind checkpoint|restore|image|transfer|pull|all] [--state queued|running|succeeded|failed|interrupted] [--limit N] [--json] "
     "--agent URL --token-file FILE",
     "  --kind KIND           which jobs (default all)\n"
     "  --state STATE         only jobs in this state (default: any)\n"
     "  --limit N             at most N of each kind, newest first (default 50, at most 500)\n"
     "  --json                the list as JSON\n",
     kAgentFlags, "gpuckpt jobs --state failed -o wide --agent http://127.0.0.1:7469 --token-file /etc/gpuckpt/auth/token",
     true},
    {"job", "gpuckpt job ID [--follow] [--json] --agent URL --token-file FILE",
     "  ID                    a job id as 'gpuckpt jobs' lists it (ck-..., rs-..., im-..., tr-..., pl-...)\n"
     "  --follow, -f          print its phases until it ends; exit 0 succeeded, 1 failed (default: show it now)\n"
     "  --json                the job as JSON\n",
     kAgentFlags, "gpuckpt job ck-20261122T001228Z-61ef843a --follow --agent http://127.0.0.1:7469"},
    {"doctor",
     "gpuckpt doctor [--host-root DIR] [--criu PATH | --no-criu] [--runc PATH] [--plugin-dir DIR] [--hooks-dir DIR] "
     "[--archive-dir DIR] "
     "[--json]",
     "  --host-root DIR       where the node's /sys, /proc, /dev are (default /)\n"
     "  --criu PATH           the CRIU to check (default criu on PATH)\n"
     "  --no-criu             skip the CRIU checks (in a pod without the node's CRIU)\n"
     "  --runc PATH           the runc whose version decides where a restore lands on cgroup v2 (default runc on PATH)\n"
     "  --plugin-dir DIR      CRIU's plugin directory (default /usr/lib/criu)\n"
     "  --hooks-dir DIR       the runtime's hooks.d (default /usr/share/containers/oci/hooks.d)\n"
     "  --archive-dir DIR     where archives go, for the free-space check (default /var/lib/gpuckpt/checkpoints)\n"
     "  --json                the report as JSON; exit 1 when a check fails\n",
     nullptr, "gpuckpt doctor --json"},
};

const Help* help_of(std::string_view verb) {
  for (const auto& h : kHelp)
    if (verb == h.verb) return &h;
  return nullptr;
}

}  // namespace

bool offers_json(std::string_view verb) {
  const Help* h = help_of(verb);
  return h != nullptr && std::string_view(h->usage).find("--json") != std::string_view::npos;
}

bool offers_wide(std::string_view verb) {
  const Help* h = help_of(verb);
  return h != nullptr && h->wide;
}

bool takes_output_file(std::string_view verb) {
  const Help* h = help_of(verb);
  return h != nullptr && h->output_file;
}

int print_help(std::string_view verb) {
  for (const auto& h : kHelp) {
    if (verb != h.verb) continue;
    std::printf("usage: %s\n\nflags:\n%s%s", h.usage, h.flags, h.shared ? h.shared : "");
    if (offers_json(verb) && !h.output_file)
      std::printf("  -o, --output FORMAT   json (the same as --json), yaml (that document as YAML)%s; a failure\n"
                  "                        prints an error object in that form (default: text)\n",
                  h.wide ? ", wide (more columns)" : "");
    std::printf("  --help, -h            this help\n");
    if (h.more != nullptr) h.more();
    std::printf("\nexample:\n  %s\n\n", h.example);
    std::printf("exit codes: 0 ok, 1 failure, 2 bad input or refused request, 3 no GPU match\n");
    return 0;
  }
  std::printf("gpuckpt %.*s: no help written for this verb\n", static_cast<int>(verb.size()), verb.data());
  return 1;
}

}  // namespace gpuckpt::cli
