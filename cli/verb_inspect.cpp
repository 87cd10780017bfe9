// gpuckpt inspect ARCHIVE [--host-root DIR] [--nvml-snapshot FILE] [--json]
// What a checkpoint archive holds, which GPUs it needs, and whether this node can take it (exit 3: it cannot).
// Given a GPU memory image (gpuckpt-gpumem-PID.img), a manifest of a store-backed one
// (gpuckpt-gpumem-PID.manifest.json, its chunks checked in GPUCKPT_GPU_STORE or the node's store) or a CRIU image
// directory holding some, it reads and checks every chunk of each and says what they hold.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>
#include <span>
#include <string>

#include "cli/cli_args.h"
#include "cli/verb_help.h"
#include "archive/checkpoint_archive.h"
#include "gpumem/chunk_store.h"
#include "gpumem/gpu_image.h"
#include "gpumem/gpu_manifest.h"
#include "gpu/matcher.h"
#include "gpu/properties_record.h"

namespace gpuckpt::cli {

namespace {

constexpr const char* kUsage =
    "gpuckpt inspect ARCHIVE|GPU-MEMORY-IMAGE|IMAGE-DIR [--timeout SECONDS] [--host-root DIR] [--nvml-snapshot FILE] "
    "[--json]";

// How long reading one archive may take (decompression and the walk of its entries) unless --timeout says: an
// archive from elsewhere is untrusted, and a few KB can declare work for hours. A real archive of tens of GB reads
// in minutes; the message says to raise it.
constexpr long kDefaultInspectSeconds = 600;

// A manifest: its summary, then every chunk read from the store, decompressed and hashed.
int inspect_manifest(int dir_fd, const std::string& name) {
  auto manifest = gpu_image::read_manifest(dir_fd, name);
  if (!manifest) {
    std::fprintf(stderr, "gpuckpt inspect: %s\n", manifest.error().message.c_str());
    return kExitBadInput;
  }
  const auto summary = gpu_image::summarize_manifest(*manifest);
  std::printf("%s", gpu_image::format_manifest_summary(name, summary).c_str());
  const std::string store_dir = configured_store_dir();
  auto opened = chunk_store::Store::open(store_dir, false);
  if (!opened) {
    std::fprintf(stderr, "gpuckpt inspect: %s: chunks not checked: %s\n", name.c_str(), opened.error().message.c_str());
    return kExitBadInput;
  }
  std::shared_ptr<const chunk_store::Store> store(std::move(*opened));
  if (auto complete = gpu_image::check_chunks(*manifest, *store, name); !complete) {
    std::fprintf(stderr, "gpuckpt inspect: %s\n", complete.error().message.c_str());
    return kExitBadInput;
  }
  gpu_image::StoreReader reader(std::move(*manifest), store, name);
  gpu_image::ChunkCodec codec(gpu_image::kMaxChunkSize);
  std::vector<std::byte> record, out;
  for (std::size_t i = 0; i < reader.entries().size(); ++i) {
    out.resize(reader.entries()[i].raw_size);
    if (auto ok = reader.read_chunk(i, codec, record, out); !ok) {
      std::fprintf(stderr, "gpuckpt inspect: %s\n", ok.error().message.c_str());
      return kExitBadInput;
    }
  }
  std::printf("  every chunk checked in %s: ok\n", store_dir.c_str());
  return kExitOk;
}

// GPU memory images and manifests: every chunk read, checked and decompressed. Exit 0 when all are sound.
int inspect_gpu_images(const std::filesystem::path& dir, const std::vector<std::string>& names) {
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    std::fprintf(stderr, "gpuckpt inspect: cannot open %s\n", dir.c_str());
    return kExitBadInput;
  }
  int rc = kExitOk;
  for (const auto& name : names) {
    if (gpu_image::is_manifest_name(name)) {
      if (int manifest_rc = inspect_manifest(dir_fd, name); manifest_rc != kExitOk) rc = manifest_rc;
      continue;
    }
    auto summary = gpu_image::summarize(dir_fd, name, true);
    if (!summary) {
      std::fprintf(stderr, "gpuckpt inspect: %s\n", summary.error().message.c_str());
      rc = kExitBadInput;
      continue;
    }
    std::printf("%s  every chunk checked: ok\n", gpu_image::format_summary(name, *summary).c_str());
  }
  ::close(dir_fd);
  return rc;
}

std::string gib(std::uint64_t bytes) {
  if (bytes == 0) return "memory unknown";   // NVIDIA without NVML: /proc/driver/nvidia has no memory size
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1ULL << 30));
  return text;
}

// containerd >= 2.1 restores a CRI checkpoint only after pulling its base image by config.dump's rootfsImageRef
// from that image's registry, even when the node has the image; a reference without a registry digest (an
// image imported with `ctr images import` or `podman load`: the runtime recorded only its id) cannot be pulled.
struct BaseImagePull {
  std::string ref;
  bool pullable = false;
  std::string note;
};

std::optional<BaseImagePull> containerd_base_image_pull(const CheckpointInfo& info) {
  if (info.engine != "containerd") return std::nullopt;
  BaseImagePull pull;
  pull.ref = info.raw_image;
  const auto at = pull.ref.find("@sha256:");
  pull.pullable = at != std::string::npos && at > 0;
  if (pull.pullable) {
    // "host[:port]/repo@digest" names its registry; "repo@digest" and "user/repo@digest" are Docker Hub's
    const auto slash = pull.ref.find('/');
    std::string registry = slash < at ? pull.ref.substr(0, slash) : "";
    if (registry.find_first_of(".:") == std::string::npos && registry != "localhost") registry = "docker.io";
    pull.note = "containerd 2.x pulls " + pull.ref + " when it restores this checkpoint through CRI (even where the "
                "image is local): the target node must reach " + registry + " with its pull credentials";
  } else {
    pull.note = "containerd 2.x restores this checkpoint through CRI only after pulling its base image by " +
                std::string(pull.ref.empty() ? "(none recorded)" : "'" + pull.ref + "'") +
                ", which names no registry digest (the image was imported, not pulled): CreateContainer will fail "
                "with \"failed to pull checkpoint base image\". Push " +
                (info.image.empty() ? std::string("the base image") : info.image) +
                " to a registry the nodes can pull from, run the workload from that registry's image, and "
                "checkpoint again (or restore with gpuckpt's agent, runtime.kind: containerd, which needs no pull)";
  }
  return pull;
}

// What the archive holds of the GPU memory: inline images, or manifests naming chunks in a store.
struct GpuMemoryInArchive {
  std::vector<std::pair<std::string, gpu_image::ManifestSummary>> manifests;
  std::vector<std::string> problems;   // manifests that do not parse
};

GpuMemoryInArchive gpu_memory_in(const CheckpointInfo& info) {
  GpuMemoryInArchive out;
  for (const auto& [name, text] : info.memory_manifests) {
    auto manifest = gpu_image::parse_manifest(text, name);
    if (manifest) out.manifests.emplace_back(name, gpu_image::summarize_manifest(std::move(*manifest)));
    else out.problems.push_back(manifest.error().message);
  }
  return out;
}

std::string gpu_memory_line(const CheckpointInfo& info) {
  char buf[256];
  std::string line;
  if (info.gpu_image_files > 0) {
    std::snprintf(buf, sizeof buf, "inline: %zu image(s), %.1f MiB in this archive", info.gpu_image_files,
                  static_cast<double>(info.gpu_image_bytes) / (1 << 20));
    line = buf;
  }
  const auto found = gpu_memory_in(info);
  for (const auto& [name, s] : found.manifests) {
    std::snprintf(buf, sizeof buf, "store-backed: %s, checkpoint %s: %zu chunks, %.1f MiB of memory, %.1f MiB stored "
                  "in the chunk store %s", name.c_str(), s.manifest.checkpoint.c_str(), s.manifest.entries.size(),
                  static_cast<double>(s.memory_bytes) / (1 << 20), static_cast<double>(s.stored_bytes) / (1 << 20),
                  s.manifest.store.c_str());
    line += (line.empty() ? "" : "\n             ") + std::string(buf);
  }
  if (info.carried_chunks > 0) {
    std::snprintf(buf, sizeof buf, "exported: this archive carries %zu chunks, %.1f MiB (%s/); `gpuckpt import` puts "
                  "them into a node's chunk store before a restore", info.carried_chunks,
                  static_cast<double>(info.carried_chunk_bytes) / (1 << 20), kCarriedChunksDir);
    line += (line.empty() ? "" : "\n             ") + std::string(buf);
  }
  for (const auto& problem : found.problems) line += (line.empty() ? "" : "\n             ") + ("UNREADABLE: " + problem);
  return line.empty() ? "none of gpuckpt's (no GPU memory image or manifest)" : line;
}

nlohmann::json gpu_memory_json(const CheckpointInfo& info) {
  nlohmann::json manifests = nlohmann::json::array();
  const auto found = gpu_memory_in(info);
  for (const auto& [name, s] : found.manifests)
    manifests.push_back({{"name", name}, {"checkpoint", s.manifest.checkpoint}, {"store", s.manifest.store},
                         {"kind", s.manifest.kind == gpu_image::MemoryKind::CpuPages ? "cpu-pages" : "gpu-memory"},
                         {s.manifest.kind == gpu_image::MemoryKind::CpuPages ? "pages_id" : "vpid",
                          s.manifest.header.vpid},
                         {"chunks", s.manifest.entries.size()},
                         {"zero_chunks", s.zero_chunks}, {"memory_bytes", s.memory_bytes},
                         {"stored_bytes", s.stored_bytes}});
  return {{"inline_images", info.gpu_image_files}, {"inline_bytes", info.gpu_image_bytes},
          {"manifests", std::move(manifests)}, {"unreadable_manifests", found.problems},
          {"carried_chunks", info.carried_chunks}, {"carried_chunk_bytes", info.carried_chunk_bytes}};
}

struct InspectArgs {
  InventoryArgs inventory;
  std::string target;
  bool json = false;
  long timeout_seconds = kDefaultInspectSeconds;
};

// The arguments, or the exit code to stop with (--help, a usage error).
std::optional<int> parse_inspect_args(std::span<char*> args, InspectArgs& out) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      return print_help("inspect");
    } else if (arg == "--json") {
      out.json = true;
    } else if (arg == "--timeout") {
      char* end = nullptr;
      out.timeout_seconds = i + 1 < args.size() ? std::strtol(args[++i], &end, 10) : 0;
      if (end == nullptr || *end != '\0' || out.timeout_seconds <= 0)
        return usage_error("inspect", "--timeout needs a positive number of seconds", kUsage);
    } else if (out.inventory.consume(args, i)) {
      if (!out.inventory.problem.empty()) return usage_error("inspect", out.inventory.problem, kUsage);
    } else if (arg.empty() || arg[0] == '-' || !out.target.empty()) {
      return usage_error("inspect", "unexpected argument '" + arg + "'", kUsage);
    } else {
      out.target = arg;
    }
  }
  if (out.target.empty()) return usage_error("inspect", "name the checkpoint archive", kUsage);
  return std::nullopt;
}

// A directory: the GPU memory images and manifests in it, or the answer that a CRIU image directory holds none.
int inspect_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (gpu_image::vpid_from_file_name(name) > 0 || gpu_image::is_manifest_name(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  if (!names.empty()) return inspect_gpu_images(dir, names);
  // A CRIU image directory of processes that used no GPU is a fine answer; any other directory is a wrong input.
  if (std::filesystem::exists(dir / "inventory.img", ec)) {
    std::printf("%s is a CRIU image directory with no GPU memory image (%s<PID>%s) or manifest (%s<PID>%s): its "
                "processes held no GPU memory\n", dir.c_str(), gpu_image::kFilePrefix, gpu_image::kFileSuffix,
                gpu_image::kFilePrefix, gpu_image::kManifestSuffix);
    return kExitOk;
  }
  std::fprintf(stderr,
               "gpuckpt inspect: %s is a directory, neither a CRIU image directory (no inventory.img) nor one "
               "holding GPU memory images (%s<PID>%s); name a checkpoint archive (.tar, .tar.zst, .tar.gz), a GPU "
               "memory image or manifest, or a CRIU image directory\n",
               dir.c_str(), gpu_image::kFilePrefix, gpu_image::kFileSuffix);
  return kExitBadInput;
}

int archive_unreadable(const std::string& archive, const Error& error, long timeout_seconds) {
  const std::string& why = error.message;
  if (error.errno_value == ETIMEDOUT)
    std::fprintf(stderr, "gpuckpt inspect: reading %s took longer than %ld s and was stopped (%s); if it is a "
                 "large archive you trust, raise --timeout\n", archive.c_str(), timeout_seconds, why.c_str());
  else if (why.find(archive) != std::string::npos)
    std::fprintf(stderr, "gpuckpt inspect: %s\n", why.c_str());
  else
    std::fprintf(stderr, "gpuckpt inspect: %s is not a checkpoint archive gpuckpt can read: %s\n", archive.c_str(),
                 why.c_str());
  return kExitBadInput;
}

// Whether this node can take the checkpoint: the verdict as people read it and the assignments as JSON.
struct NodeVerdict {
  std::string text = "yes: no GPU state, restores on any node";
  bool fits = true;
  nlohmann::json match = nullptr;
};

NodeVerdict match_on(const CheckpointGpuRecord& checkpoint, const NodeInventory& node) {
  NodeVerdict verdict;
  MatchRequest request;
  request.source = &checkpoint.record;
  request.target = &node;
  request.policy = MatchPolicy::from_env();
  auto outcome = match_gpus(request);
  if (auto* plan = std::get_if<MatchPlan>(&outcome)) {
    verdict.text = "yes:";
    verdict.match = nlohmann::json::array();
    for (const auto& a : plan->assignments) {
      verdict.text += " " + a.source_id + " -> " + a.target_id;
      verdict.match.push_back({{"source_id", a.source_id}, {"target_id", a.target_id}});
    }
    for (const auto& r : plan->relaxations) verdict.text += " (relaxed: " + r + ")";
    return verdict;
  }
  const auto& failure = std::get<MatchFailure>(outcome);
  verdict.fits = false;
  verdict.text = "no: " + failure.summary;
  for (const auto& r : failure.rejections)
    verdict.text += "\n      " + r.source_id + " x " + r.candidate_id + ": " + r.property + " - " + r.detail;
  return verdict;
}

void print_inspect_json(const std::string& archive, const CheckpointInfo& info, const NodeVerdict& verdict,
                        const std::optional<BaseImagePull>& base_pull) {
  nlohmann::json out = {{"archive", archive},
                        {"container_name", info.container_name},
                        {"container_id", info.container_id},
                        {"image", info.image},
                        {"engine", info.engine},
                        {"runtime", info.runtime},
                        {"created", info.created},
                        {"archive_bytes", info.archive_bytes},
                        {"content_bytes", info.content_bytes},
                        {"entries", info.entry_count},
                        {"criu_images", info.has_criu_images},
                        {"spec_devices", info.spec_devices},
                        {"annotations", info.spec.value("annotations", nlohmann::json::object())},
                        {"gpus", info.gpus ? to_json(*info.gpus) : nlohmann::json(nullptr)},
                        {"gpu_memory", gpu_memory_json(info)},
                        {"fits_this_node", verdict.fits},
                        {"match", verdict.match}};
  if (base_pull)
    out["containerd_base_image_pull"] = {{"ref", base_pull->ref}, {"pullable", base_pull->pullable},
                                         {"note", base_pull->note}};
  else
    out["containerd_base_image_pull"] = nullptr;
  std::printf("%s\n", out.dump(2).c_str());
}

void print_gpu_record(const CheckpointGpuRecord& g) {
  std::printf("gpuckpt:     checkpoint %s, record v%d, taken on %s (%zu GPU(s))\n", g.checkpoint_id.c_str(), g.version,
              g.record.node.hostname.c_str(), g.record.node.gpus.size());
  for (const auto& gpu : g.record.node.gpus) {
    bool used = false;
    for (const auto& id : g.record.used_gpu_ids) used = used || id == gpu.id;
    if (used)
      std::printf("  needs GPU  %s: %s, %s, driver %s\n", gpu.id.c_str(), gpu.name.c_str(),
                  gib(gpu.memory_bytes).c_str(), gpu.driver_version.c_str());
  }
  for (const auto& d : g.devices)
    std::printf("  device     %s%s%s\n", d.container_path.c_str(), d.gpu_id.empty() ? "" : " -> ", d.gpu_id.c_str());
  for (const auto& [name, value] : g.gpu_env) std::printf("  env        %s=%s\n", name.c_str(), value.c_str());
}

void print_inspect_text(const std::string& archive, const CheckpointInfo& info, const NodeVerdict& verdict,
                        const std::optional<BaseImagePull>& base_pull) {
  std::printf("archive:     %s (%llu bytes, %zu entries, %llu bytes unpacked)\n", archive.c_str(),
              static_cast<unsigned long long>(info.archive_bytes), info.entry_count,
              static_cast<unsigned long long>(info.content_bytes));
  std::printf("container:   %s (%s)\n", info.container_name.c_str(), info.container_id.substr(0, 12).c_str());
  std::printf("image:       %s\n", info.image.c_str());
  std::printf("engine:      %s, runtime %s, created %s\n", info.engine.c_str(), info.runtime.c_str(),
              info.created.c_str());
  std::printf("CRIU images: %s\n", info.has_criu_images ? "yes" : "MISSING (not restorable)");
  std::string devices;
  for (const auto& d : info.spec_devices) devices += (devices.empty() ? "" : " ") + d;
  std::printf("devices:     %s\n", devices.empty() ? "-" : devices.c_str());
  std::printf("GPU memory:  %s\n", gpu_memory_line(info).c_str());
  if (info.gpus)
    print_gpu_record(*info.gpus);
  else
    std::printf("gpuckpt:     not annotated (checkpointed without gpuckpt; no GPU record)\n");
  std::printf("this node:   %s\n", verdict.text.c_str());
  if (base_pull)
    std::printf("%s %s\n", base_pull->pullable ? "base image: " : "WARNING:    ", base_pull->note.c_str());
}

}  // namespace

int run_inspect(std::span<char*> args) {
  InspectArgs opts;
  if (auto stop = parse_inspect_args(args, opts)) return *stop;
  init_cli_logging("inspect");
  const std::string& archive = opts.target;
  const std::filesystem::path target(archive);
  std::error_code ec;
  if (std::filesystem::is_directory(target, ec)) return inspect_directory(target);
  if (gpu_image::looks_like_image(archive) || gpu_image::is_manifest_name(target.filename().string()))
    return inspect_gpu_images(target.has_parent_path() ? target.parent_path() : ".", {target.filename().string()});
  ArchiveLimits limits;
  limits.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opts.timeout_seconds);
  auto info = inspect_checkpoint_archive(archive, limits);
  if (!info) return archive_unreadable(archive, info.error(), opts.timeout_seconds);
  NodeVerdict verdict;
  if (info->gpus && !info->gpus->record.used_gpu_ids.empty()) {
    auto inventory = opts.inventory.read("inspect");
    if (!inventory) return 1;
    verdict = match_on(*info->gpus, *inventory);
  }
  const auto base_pull = containerd_base_image_pull(*info);
  if (opts.json)
    print_inspect_json(archive, *info, verdict, base_pull);
  else
    print_inspect_text(archive, *info, verdict, base_pull);
  return verdict.fits ? kExitOk : kExitNoMatch;
}

}  // namespace gpuckpt::cli
