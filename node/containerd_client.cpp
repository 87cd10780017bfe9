#include "node/containerd_client.h"

#include <csignal>
#include <ctime>

#include "node/grpc_unix.h"
#include "base/json_reader.h"
#include "base/log.h"
#include "github.com/containerd/containerd/api/services/containers/v1/containers.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/snapshots/v1/snapshots.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/tasks/v1/tasks.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/version/v1/version.grpc.pb.h"
#include "github.com/containerd/containerd/runtime/v2/runc/options/oci.pb.h"

namespace gpuckpt::node {

namespace containers = containerd::services::containers::v1;
namespace snapshots = containerd::services::snapshots::v1;
namespace tasks = containerd::services::tasks::v1;
namespace runc = containerd::runc::v1;
using std::chrono::milliseconds;
using VersionStub = containerd::services::version::v1::Version::Stub;
using ContainersStub = containers::Containers::Stub;
using TasksStub = tasks::Tasks::Stub;
using SnapshotsStub = snapshots::Snapshots::Stub;

namespace {

// containerd stores the OCI spec as JSON under this type URL (containerd/typeurl registration of specs.Spec).
constexpr const char* kSpecTypeUrl = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
// The runc shim resolves Any options by the proto's full name (typeurl falls back to the proto registry).
constexpr const char* kRuncCheckpointOptions = "containerd.runc.v1.CheckpointOptions";
constexpr const char* kRuncOptions = "containerd.runc.v1.Options";

std::string task_status(containerd::v1::types::Status status) {
  switch (status) {
    case containerd::v1::types::CREATED: return "created";
    case containerd::v1::types::RUNNING: return "running";
    case containerd::v1::types::STOPPED: return "stopped";
    case containerd::v1::types::PAUSED: return "paused";
    case containerd::v1::types::PAUSING: return "pausing";
    default: return "unknown";
  }
}

std::vector<ContainerdMount> from_proto(const google::protobuf::RepeatedPtrField<containerd::types::Mount>& mounts) {
  std::vector<ContainerdMount> out;
  for (const auto& m : mounts) out.push_back({m.type(), m.source(), {m.options().begin(), m.options().end()}});
  return out;
}

}  // namespace

struct ContainerdClient::Stubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<containerd::services::version::v1::Version::Stub> version;
  std::unique_ptr<containers::Containers::Stub> containers;
  std::unique_ptr<tasks::Tasks::Stub> tasks;
  std::unique_ptr<snapshots::Snapshots::Stub> snapshots;
};

ContainerdClient::ContainerdClient(ContainerdOptions options) : options_(std::move(options)), stubs_(new Stubs) {
  stubs_->channel = unix_socket_channel(options_.address);
  stubs_->version = containerd::services::version::v1::Version::NewStub(stubs_->channel);
  stubs_->containers = containers::Containers::NewStub(stubs_->channel);
  stubs_->tasks = tasks::Tasks::NewStub(stubs_->channel);
  stubs_->snapshots = snapshots::Snapshots::NewStub(stubs_->channel);
}

ContainerdClient::~ContainerdClient() = default;

namespace {

// Every containerd call names the namespace it works in.
template <class Stub, class Request, class Response>
grpc::Status namespaced(const ContainerdOptions& options, Stub& stub,
                        grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                        const Request& request, Response& response, milliseconds timeout) {
  return call_unary(stub, method, request, response, timeout, "containerd-namespace", options.namespace_name);
}

}  // namespace

Error ContainerdClient::failure(const grpc::Status& status, const std::string& what, milliseconds timeout) const {
  return grpc_error(status, "containerd " + what, options_.address, timeout,
                    timeout == milliseconds(options_.checkpoint_timeout) ? "checkpoints.runtime_timeout_seconds"
                                                                          : "runtime.containerd.call_timeout_seconds");
}

Result<std::string> ContainerdClient::version() {
  containerd::services::version::v1::VersionResponse response;
  const auto status = namespaced(options_, *stubs_->version, &VersionStub::Version,
                                 google::protobuf::Empty(), response, options_.call_timeout);
  if (!status.ok()) return failure(status, "Version", options_.call_timeout);
  return response.version();
}

namespace {

Result<ContainerdContainer> from_proto(const containers::Container& c) {
  ContainerdContainer out;
  out.id = c.id();
  out.labels.insert(c.labels().begin(), c.labels().end());
  out.image = c.image();
  out.runtime = c.runtime().name();
  out.snapshotter = c.snapshotter();
  out.snapshot_key = c.snapshot_key();
  out.sandbox = c.sandbox();
  if (c.has_created_at()) {
    char buffer[32];
    const std::time_t t = static_cast<std::time_t>(c.created_at().seconds());
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
    out.created = buffer;
  }
  if (!c.spec().value().empty()) {
    GPUCKPT_TRY(auto spec, parse_json(c.spec().value(), "the spec of containerd container " + c.id()));
    if (!spec.is_object())
      return make_error("containerd container " + c.id() + " has a spec that is not a JSON object", EIO);
    out.spec = std::move(spec);
  }
  return out;
}

}  // namespace

Result<ContainerdContainer> ContainerdClient::container(const std::string& id) {
  containers::GetContainerRequest request;
  request.set_id(id);
  containers::GetContainerResponse response;
  const auto status = namespaced(options_, *stubs_->containers, &ContainersStub::Get,
                                 request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "container " + id, options_.call_timeout);
  return from_proto(response.container());
}

Result<std::vector<ContainerdContainer>> ContainerdClient::containers() {
  containers::ListContainersResponse response;
  const auto status = namespaced(options_, *stubs_->containers, &ContainersStub::List,
                                 containers::ListContainersRequest(), response, options_.call_timeout);
  if (!status.ok()) return failure(status, "container list", options_.call_timeout);
  std::vector<ContainerdContainer> out;
  for (const auto& c : response.containers()) {
    GPUCKPT_TRY(auto container, from_proto(c));
    out.push_back(std::move(container));
  }
  return out;
}

Result<ContainerdTask> ContainerdClient::task(const std::string& id) {
  tasks::GetRequest request;
  request.set_container_id(id);
  tasks::GetResponse response;
  const auto status = namespaced(options_, *stubs_->tasks, &TasksStub::Get, request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "task of " + id, options_.call_timeout);
  return ContainerdTask{response.process().pid(), task_status(response.process().status())};
}

Result<void> ContainerdClient::checkpoint_task(const std::string& id, const std::string& image_dir,
                                               const std::string& work_dir, bool leave_running,
                                               JobDeadline deadline) {
  runc::CheckpointOptions options;
  options.set_exit(!leave_running);
  options.set_image_path(image_dir);
  options.set_work_path(work_dir);
  options.set_file_locks(true);
  tasks::CheckpointTaskRequest request;
  request.set_container_id(id);
  request.mutable_options()->set_type_url(kRuncCheckpointOptions);
  request.mutable_options()->set_value(options.SerializeAsString());
  tasks::CheckpointTaskResponse response;
  log::info("containerd task checkpoint " + id + " -> " + image_dir + (leave_running ? " (leave running)" : ""));
  const auto status = namespaced(options_, *stubs_->tasks, &TasksStub::Checkpoint,
                                 request, response, time_left(deadline, options_.checkpoint_timeout));
  if (!status.ok()) return failure(status, "task checkpoint of " + id, options_.checkpoint_timeout);
  return {};
}

Result<std::string> ContainerdClient::snapshot_parent(const std::string& snapshotter, const std::string& key) {
  snapshots::StatSnapshotRequest request;
  request.set_snapshotter(snapshotter);
  request.set_key(key);
  snapshots::StatSnapshotResponse response;
  const auto status = namespaced(options_, *stubs_->snapshots, &SnapshotsStub::Stat,
                                 request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "snapshot " + key, options_.call_timeout);
  return response.info().parent();
}

Result<std::vector<ContainerdMount>> ContainerdClient::snapshot_mounts(const std::string& snapshotter,
                                                                       const std::string& key) {
  snapshots::MountsRequest request;
  request.set_snapshotter(snapshotter);
  request.set_key(key);
  snapshots::MountsResponse response;
  const auto status = namespaced(options_, *stubs_->snapshots, &SnapshotsStub::Mounts,
                                 request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "mounts of snapshot " + key, options_.call_timeout);
  return from_proto(response.mounts());
}

Result<std::vector<ContainerdMount>> ContainerdClient::prepare_snapshot(const std::string& snapshotter,
                                                                        const std::string& key,
                                                                        const std::string& parent) {
  snapshots::PrepareSnapshotRequest request;
  request.set_snapshotter(snapshotter);
  request.set_key(key);
  request.set_parent(parent);
  snapshots::PrepareSnapshotResponse response;
  const auto status = namespaced(options_, *stubs_->snapshots, &SnapshotsStub::Prepare,
                                 request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "snapshot prepare " + key, options_.call_timeout);
  return from_proto(response.mounts());
}

Result<void> ContainerdClient::remove_snapshot(const std::string& snapshotter, const std::string& key) {
  snapshots::RemoveSnapshotRequest request;
  request.set_snapshotter(snapshotter);
  request.set_key(key);
  google::protobuf::Empty response;
  const auto status = namespaced(options_, *stubs_->snapshots, &SnapshotsStub::Remove,
                                 request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "snapshot remove " + key, options_.call_timeout);
  return {};
}

Result<void> ContainerdClient::create_container(const ContainerdContainer& c) {
  containers::CreateContainerRequest request;
  auto* out = request.mutable_container();
  out->set_id(c.id);
  out->mutable_labels()->insert(c.labels.begin(), c.labels.end());
  out->set_image(c.image);
  out->mutable_runtime()->set_name(c.runtime);
  out->mutable_spec()->set_type_url(kSpecTypeUrl);
  out->mutable_spec()->set_value(c.spec.dump());
  out->set_snapshotter(c.snapshotter);
  out->set_snapshot_key(c.snapshot_key);
  out->set_sandbox(c.sandbox);
  containers::CreateContainerResponse response;
  const auto status = namespaced(options_, *stubs_->containers, &ContainersStub::Create,
                                 request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "container create " + c.id, options_.call_timeout);
  return {};
}

Result<void> ContainerdClient::delete_container(const std::string& id) {
  containers::DeleteContainerRequest request;
  request.set_id(id);
  google::protobuf::Empty response;
  const auto status = namespaced(options_, *stubs_->containers, &ContainersStub::Delete,
                                 request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "container delete " + id, options_.call_timeout);
  return {};
}

Result<std::uint32_t> ContainerdClient::restore_task(const std::string& id, const std::vector<ContainerdMount>& rootfs,
                                                     const std::string& image_dir, const std::string& work_dir,
                                                     const std::string& log_path, JobDeadline deadline) {
  tasks::CreateTaskRequest request;
  request.set_container_id(id);
  for (const auto& m : rootfs) {
    auto* mount = request.add_rootfs();
    mount->set_type(m.type);
    mount->set_source(m.source);
    for (const auto& o : m.options) mount->add_options(o);
  }
  if (!log_path.empty()) {
    request.set_stdout("file://" + log_path);
    request.set_stderr("file://" + log_path);
  }
  runc::Options options;
  options.set_criu_image_path(image_dir);
  options.set_criu_work_path(work_dir);
  request.mutable_options()->set_type_url(kRuncOptions);
  request.mutable_options()->set_value(options.SerializeAsString());
  tasks::CreateTaskResponse response;
  log::info("containerd task restore " + id + " <- " + image_dir);
  const auto status = namespaced(options_, *stubs_->tasks, &TasksStub::Create,
                                 request, response, time_left(deadline, options_.checkpoint_timeout));
  if (!status.ok()) return failure(status, "task restore of " + id, options_.checkpoint_timeout);
  return response.pid();
}

Result<void> ContainerdClient::start_task(const std::string& id, JobDeadline deadline) {
  tasks::StartRequest request;
  request.set_container_id(id);
  tasks::StartResponse response;
  const auto status = namespaced(options_, *stubs_->tasks, &TasksStub::Start,
                                 request, response, time_left(deadline, options_.call_timeout));
  if (!status.ok()) return failure(status, "task start " + id, options_.call_timeout);
  return {};
}

Result<void> ContainerdClient::kill_task(const std::string& id, int signal) {
  tasks::KillRequest request;
  request.set_container_id(id);
  request.set_signal(static_cast<std::uint32_t>(signal));
  request.set_all(true);
  google::protobuf::Empty response;
  const auto status = namespaced(options_, *stubs_->tasks, &TasksStub::Kill,
                                 request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "task kill " + id, options_.call_timeout);
  return {};
}

Result<void> ContainerdClient::delete_task(const std::string& id) {
  tasks::DeleteTaskRequest request;
  request.set_container_id(id);
  tasks::DeleteResponse response;
  const auto status = namespaced(options_, *stubs_->tasks, &TasksStub::Delete,
                                 request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "task delete " + id, options_.call_timeout);
  return {};
}

}  // namespace gpuckpt::node
