#include "node/containerd_image_import.h"

#include <ctime>
#include <fstream>
#include <random>

#include "node/grpc_unix.h"
#include "base/json_reader.h"
#include "base/log.h"
#include "github.com/containerd/containerd/api/services/content/v1/content.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/diff/v1/diff.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/images/v1/images.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/leases/v1/leases.grpc.pb.h"
#include "github.com/containerd/containerd/api/services/snapshots/v1/snapshots.grpc.pb.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;
namespace content = containerd::services::content::v1;
namespace diff = containerd::services::diff::v1;
namespace images = containerd::services::images::v1;
namespace leases = containerd::services::leases::v1;
namespace snapshots = containerd::services::snapshots::v1;
using std::chrono::milliseconds;

namespace {

struct Blob {
  std::string media_type;
  std::string digest;   // "sha256:..."
  std::int64_t size = 0;
};

std::string suffix() {
  std::random_device rd;
  return std::to_string(rd()) + std::to_string(rd());
}

class Importer {
 public:
  Importer(const ContainerdOptions& options, JobDeadline deadline)
      : options_(options),
        deadline_(deadline),
        channel_(unix_socket_channel(options.address)),
        content_(content::Content::NewStub(channel_)),
        diff_(diff::Diff::NewStub(channel_)),
        images_(images::Images::NewStub(channel_)),
        leases_(leases::Leases::NewStub(channel_)),
        snapshots_(snapshots::Snapshots::NewStub(channel_)) {}

  Result<void> run(const fs::path& layout, const std::string& name, const std::string& snapshotter) {
    GPUCKPT_TRY_VOID(read_layout(layout));
    auto leased = create_lease();
    if (!leased) return leased;
    auto imported = import(layout, name, snapshotter);
    leases::DeleteRequest drop;
    drop.set_id(lease_);
    google::protobuf::Empty none;
    (void)call(*leases_, &leases::Leases::Stub::Delete, drop, none, options_.call_timeout);
    return imported;
  }

 private:
  template <class Stub, class Request, class Response>
  grpc::Status call(Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                    const Request& request, Response& response, milliseconds timeout) {
    grpc::ClientContext context;
    set_deadline(context, timeout);
    context.AddMetadata("containerd-namespace", options_.namespace_name);
    if (!lease_.empty()) context.AddMetadata("containerd-lease", lease_);
    return (stub.*method)(&context, request, &response);
  }

  // A call's own limit, cut short by the job's deadline.
  milliseconds left(milliseconds limit) const { return time_left(deadline_, limit); }

  Error failure(const grpc::Status& status, const std::string& what) const {
    return grpc_error(status, "containerd image import: " + what, options_.address, options_.checkpoint_timeout,
                      "checkpoints.runtime_timeout_seconds");
  }

  Result<void> read_layout(const fs::path& layout) {
    GPUCKPT_TRY(auto index, read_json_file(layout / "index.json"));
    if (!index) return make_error(layout.string() + " is not an OCI image layout (no index.json)", EINVAL);
    const auto& manifests = (*index)["manifests"];
    if (!manifests.is_array() || manifests.size() != 1 || !manifests[0].is_object())
      return make_error(layout.string() + ": expected one manifest in index.json", EINVAL);
    GPUCKPT_TRY(manifest_, blob_of(manifests[0]), (layout / "index.json").string());
    GPUCKPT_TRY(auto manifest, read_json_file(blob_path(layout, manifest_)));
    if (!manifest) return make_error(layout.string() + ": manifest blob missing", EINVAL);
    GPUCKPT_TRY(config_, blob_of((*manifest)["config"]), "the config in " + blob_path(layout, manifest_).string());
    const auto& layers = (*manifest)["layers"];
    if (!layers.is_array() || layers.size() != 1) return make_error(layout.string() + ": expected one layer", EINVAL);
    GPUCKPT_TRY(layer_, blob_of(layers[0]), "the layer in " + blob_path(layout, manifest_).string());
    GPUCKPT_TRY(auto config_json, read_json_file(blob_path(layout, config_)));
    if (!config_json) return make_error(layout.string() + ": config blob missing", EINVAL);
    const auto& diff_ids = (*config_json)["rootfs"]["diff_ids"];
    if (!diff_ids.is_array() || diff_ids.size() != 1 || !diff_ids[0].is_string())
      return make_error(layout.string() + ": config has no single diff id", EINVAL);
    diff_id_ = diff_ids[0].get<std::string>();   // one layer: its chain id is its diff id
    return {};
  }

  static Result<Blob> blob_of(const nlohmann::json& d) {
    if (!d.is_object() || !d.contains("digest") || !d["digest"].is_string() || !d.contains("size") ||
        !d["size"].is_number_integer() || !d.contains("mediaType") || !d["mediaType"].is_string())
      return make_error("an OCI descriptor lacks mediaType, digest or size", EINVAL);
    Blob b{d["mediaType"].get<std::string>(), d["digest"].get<std::string>(), d["size"].get<std::int64_t>()};
    if (b.digest.rfind("sha256:", 0) != 0 || b.digest.size() != 71 ||
        b.digest.find_first_not_of("0123456789abcdef", 7) != std::string::npos)
      return make_error("descriptor digest '" + b.digest.substr(0, 80) + "' is not sha256", EINVAL);
    return b;
  }

  static fs::path blob_path(const fs::path& layout, const Blob& b) {
    return layout / "blobs" / "sha256" / b.digest.substr(7);
  }

  Result<void> create_lease() {
    leases::CreateRequest request;
    request.set_id("gpuckpt-import-" + suffix());
    char expire[32];
    const std::time_t t = std::time(nullptr) + 3600;
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    std::strftime(expire, sizeof expire, "%Y-%m-%dT%H:%M:%SZ", &tm);
    (*request.mutable_labels())["containerd.io/gc.expire"] = expire;
    leases::CreateResponse response;
    const auto status = call(*leases_, &leases::Leases::Stub::Create, request, response, left(options_.call_timeout));
    if (!status.ok()) return failure(status, "lease");
    lease_ = request.id();
    return {};
  }

  // One blob into the content store: written in 1 MiB pieces and committed under its digest with `labels`.
  Result<void> write_blob(const fs::path& file, const Blob& blob, const std::map<std::string, std::string>& labels) {
    grpc::ClientContext context;
    set_deadline(context, left(options_.checkpoint_timeout));
    context.AddMetadata("containerd-namespace", options_.namespace_name);
    context.AddMetadata("containerd-lease", lease_);
    auto stream = content_->Write(&context);
    const std::string ref = "gpuckpt-" + blob.digest.substr(7, 16) + "-" + suffix();
    std::ifstream in(file, std::ios::binary);
    if (!in) return make_error("cannot read " + file.string(), EIO);
    std::vector<char> buffer(1 << 20);
    std::int64_t offset = 0;
    content::WriteContentResponse response;
    for (;;) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      const auto n = in.gcount();
      if (n <= 0) break;
      content::WriteContentRequest request;
      request.set_action(content::WRITE);
      request.set_ref(ref);
      request.set_total(blob.size);
      request.set_expected(blob.digest);
      request.set_offset(offset);
      request.set_data(buffer.data(), static_cast<std::size_t>(n));
      if (!stream->Write(request) || !stream->Read(&response)) break;
      offset += n;
    }
    if (offset == blob.size) {
      content::WriteContentRequest commit;
      commit.set_action(content::COMMIT);
      commit.set_ref(ref);
      commit.set_total(blob.size);
      commit.set_expected(blob.digest);
      commit.set_offset(offset);
      commit.mutable_labels()->insert(labels.begin(), labels.end());
      if (stream->Write(commit)) stream->Read(&response);
    }
    stream->WritesDone();
    while (stream->Read(&response)) {}   // containerd sends its last status message once more at the end
    const auto status = stream->Finish();
    if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS) return update_labels(blob, labels);
    if (!status.ok()) return failure(status, "content write of " + blob.digest);
    if (offset != blob.size)
      return make_error("containerd image import: wrote " + std::to_string(offset) + " of " +
                            std::to_string(blob.size) + " bytes of " + blob.digest, EIO);
    return {};
  }

  // Content that was already there keeps its data; the labels (what it references) still have to be ours.
  Result<void> update_labels(const Blob& blob, const std::map<std::string, std::string>& labels) {
    if (labels.empty()) return {};
    content::UpdateRequest request;
    request.mutable_info()->set_digest(blob.digest);
    request.mutable_info()->mutable_labels()->insert(labels.begin(), labels.end());
    for (const auto& [key, value] : labels) request.mutable_update_mask()->add_paths("labels." + key);
    content::UpdateResponse response;
    const auto status = call(*content_, &content::Content::Stub::Update, request, response, left(options_.call_timeout));
    if (!status.ok()) return failure(status, "content labels of " + blob.digest);
    return {};
  }

  // The layer as a committed snapshot named by its chain id, unless one is there already.
  Result<void> unpack(const std::string& snapshotter) {
    snapshots::StatSnapshotRequest stat;
    stat.set_snapshotter(snapshotter);
    stat.set_key(diff_id_);
    snapshots::StatSnapshotResponse info;
    if (call(*snapshots_, &snapshots::Snapshots::Stub::Stat, stat, info, left(options_.call_timeout)).ok()) return {};
    const std::string key = "gpuckpt-extract-" + suffix();
    snapshots::PrepareSnapshotRequest prepare;
    prepare.set_snapshotter(snapshotter);
    prepare.set_key(key);
    snapshots::PrepareSnapshotResponse prepared;
    auto status = call(*snapshots_, &snapshots::Snapshots::Stub::Prepare, prepare, prepared, left(options_.call_timeout));
    if (!status.ok()) return failure(status, "snapshot prepare");
    diff::ApplyRequest apply;
    apply.mutable_diff()->set_media_type(layer_.media_type);
    apply.mutable_diff()->set_digest(layer_.digest);
    apply.mutable_diff()->set_size(layer_.size);
    *apply.mutable_mounts() = prepared.mounts();
    diff::ApplyResponse applied;
    status = call(*diff_, &diff::Diff::Stub::Apply, apply, applied, left(options_.checkpoint_timeout));
    if (status.ok()) {
      snapshots::CommitSnapshotRequest commit;
      commit.set_snapshotter(snapshotter);
      commit.set_name(diff_id_);
      commit.set_key(key);
      google::protobuf::Empty none;
      status = call(*snapshots_, &snapshots::Snapshots::Stub::Commit, commit, none, left(options_.call_timeout));
      if (status.ok()) return {};
    }
    snapshots::RemoveSnapshotRequest remove;
    remove.set_snapshotter(snapshotter);
    remove.set_key(key);
    google::protobuf::Empty none;
    (void)call(*snapshots_, &snapshots::Snapshots::Stub::Remove, remove, none, options_.call_timeout);
    return failure(status, "unpacking layer " + layer_.digest);
  }

  Result<void> import(const fs::path& layout, const std::string& name, const std::string& snapshotter) {
    // containerd's garbage collector follows these labels from the image down to the snapshot.
    auto written = write_blob(blob_path(layout, layer_), layer_, {{"containerd.io/uncompressed", diff_id_}});
    if (!written) return written;
    written = write_blob(blob_path(layout, config_), config_,
                         {{"containerd.io/gc.ref.snapshot." + snapshotter, diff_id_}});
    if (!written) return written;
    written = write_blob(blob_path(layout, manifest_), manifest_,
                         {{"containerd.io/gc.ref.content.config", config_.digest},
                          {"containerd.io/gc.ref.content.l.0", layer_.digest}});
    if (!written) return written;
    auto unpacked = unpack(snapshotter);
    if (!unpacked) return unpacked;
    images::DeleteImageRequest drop;
    drop.set_name(name);
    google::protobuf::Empty none;
    (void)call(*images_, &images::Images::Stub::Delete, drop, none, left(options_.call_timeout));
    images::CreateImageRequest create;
    create.mutable_image()->set_name(name);
    create.mutable_image()->mutable_target()->set_media_type(manifest_.media_type);
    create.mutable_image()->mutable_target()->set_digest(manifest_.digest);
    create.mutable_image()->mutable_target()->set_size(manifest_.size);
    images::CreateImageResponse created;
    const auto status = call(*images_, &images::Images::Stub::Create, create, created, left(options_.call_timeout));
    if (!status.ok()) return failure(status, "image " + name);
    log::info("checkpoint image " + name + " loaded into containerd (" + manifest_.digest + ", namespace " +
              options_.namespace_name + ")");
    return {};
  }

  const ContainerdOptions& options_;
  JobDeadline deadline_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<content::Content::Stub> content_;
  std::unique_ptr<diff::Diff::Stub> diff_;
  std::unique_ptr<images::Images::Stub> images_;
  std::unique_ptr<leases::Leases::Stub> leases_;
  std::unique_ptr<snapshots::Snapshots::Stub> snapshots_;
  std::string lease_;
  Blob manifest_, config_, layer_;
  std::string diff_id_;
};

}  // namespace

Result<void> import_checkpoint_image(const ContainerdOptions& options, const fs::path& layout, const std::string& name,
                                     JobDeadline deadline, const std::string& snapshotter) {
  return Importer(options, deadline).run(layout, name, snapshotter);
}

}  // namespace gpuckpt::node
