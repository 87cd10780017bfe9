#include "archive/checkpoint_image.h"

#include <archive.h>
#include <sys/utsname.h>
#include <archive_entry.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"

namespace gpuckpt {

namespace fs = std::filesystem;

namespace {

constexpr std::uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

struct Blob {
  std::string digest;   // "sha256:<hex>"
  std::uint64_t size = 0;
};

Result<Blob> write_blob(const fs::path& blobs, const std::string& data) {
  Sha256 h;
  h.update(data.data(), data.size());
  Blob blob{"sha256:" + h.hex(), data.size()};
  GPUCKPT_TRY_VOID(write_file_atomically(blobs / blob.digest.substr(7), data));
  return blob;
}

std::string layer_media_type(int filter) {
  switch (filter) {
    case ARCHIVE_FILTER_ZSTD: return "application/vnd.oci.image.layer.v1.tar+zstd";
    case ARCHIVE_FILTER_GZIP: return "application/vnd.oci.image.layer.v1.tar+gzip";
    default: return "application/vnd.oci.image.layer.v1.tar";
  }
}

// Digest of the file as it is, digest of its decompressed tar stream (the diff id), and its compression.
struct LayerDigests {
  Blob blob;
  std::string diff_id;
  int filter = ARCHIVE_FILTER_NONE;
};

Result<LayerDigests> digest_layer(const fs::path& archive) {
  LayerDigests out;
  {
    std::ifstream in(archive, std::ios::binary);
    if (!in) return make_error("cannot read " + archive.string());
    Sha256 h;
    std::vector<char> buffer(1 << 20);
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      const auto n = static_cast<std::size_t>(in.gcount());
      h.update(buffer.data(), n);
      out.blob.size += n;
    }
    out.blob.digest = "sha256:" + h.hex();
  }
  std::unique_ptr<struct archive, int (*)(struct archive*)> raw(archive_read_new(), archive_read_free);
  archive_read_support_filter_all(raw.get());
  archive_read_support_format_raw(raw.get());
  struct archive_entry* entry = nullptr;
  if (archive_read_open_filename(raw.get(), archive.c_str(), 1 << 16) != ARCHIVE_OK ||
      archive_read_next_header(raw.get(), &entry) != ARCHIVE_OK)
    return make_error("cannot decompress " + archive.string() + ": " + archive_message(raw.get()), EIO);
  out.filter = archive_filter_code(raw.get(), 0);
  Sha256 h;
  std::vector<char> buffer(1 << 20);
  for (;;) {
    const la_ssize_t n = archive_read_data(raw.get(), buffer.data(), buffer.size());
    if (n < 0) return make_error("cannot decompress " + archive.string() + ": " + archive_message(raw.get()), EIO);
    if (n == 0) break;
    h.update(buffer.data(), static_cast<std::size_t>(n));
  }
  out.diff_id = "sha256:" + h.hex();
  return out;
}

}  // namespace

Sha256::Sha256()
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::block(const unsigned char* p) {
  std::uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = (std::uint32_t{p[4 * i]} << 24) | (std::uint32_t{p[4 * i + 1]} << 16) | (std::uint32_t{p[4 * i + 2]} << 8) |
           std::uint32_t{p[4 * i + 3]};
  for (int i = 16; i < 64; ++i) {
    const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  auto [a, b, c, d, e, f, g, h] = state_;
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
    const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  const std::uint32_t add[8] = {a, b, c, d, e, f, g, h};
  for (int i = 0; i < 8; ++i) state_[i] += add[i];
}

void Sha256::update(const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  length_ += size;
  while (size > 0) {
    const std::size_t take = std::min(size, buffer_.size() - used_);
    std::memcpy(buffer_.data() + used_, p, take);
    used_ += take;
    p += take;
    size -= take;
    if (used_ == buffer_.size()) {
      block(buffer_.data());
      used_ = 0;
    }
  }
}

std::string Sha256::hex() {
  const std::uint64_t bits = length_ * 8;
  const unsigned char pad = 0x80;
  update(&pad, 1);
  const unsigned char zero = 0;
  while (used_ != 56) update(&zero, 1);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
  update(len, 8);
  char out[65];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", state_[i]);
  return std::string(out, 64);
}

std::string_view oci_architecture() {
#if defined(__x86_64__)
  return "amd64";
#elif defined(__aarch64__)
  return "arm64";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return "ppc64le";
#elif defined(__s390x__)
  return "s390x";
#elif defined(__riscv) && __riscv_xlen == 64
  return "riscv64";
#else
#error "gpuckpt: add this architecture's OCI name to oci_architecture()"
#endif
}

std::string checkpoint_image_name(const std::string& tag) { return "localhost/gpuckpt-checkpoint:" + tag; }

namespace {

// The layer's blob: a hard link to the archive where both lie on one file system (no copy), else a copy.
Result<void> place_layer(const fs::path& archive, const fs::path& layer_path) {
  std::error_code ec;
  fs::create_hard_link(archive, layer_path, ec);
  if (!ec) return {};
  ec.clear();
  fs::copy_file(archive, layer_path, ec);
  if (ec) return make_error("cannot copy " + archive.string() + " into the image: " + ec.message(), EIO);
  return {};
}

nlohmann::json image_config(const CheckpointInfo& info, const LayerDigests& layer) {
  return {{"architecture", oci_architecture()},
          {"os", "linux"},
          {"created", info.created},
          {"config", nlohmann::json::object()},
          {"rootfs", {{"type", "layers"}, {"diff_ids", {layer.diff_id}}}}};
}

// What each engine looks for to take an image as a checkpoint (CRI-O, containerd, podman use their own prefix),
// checkpointctl's and containerd's (>= 2.1) names for the same facts, and the spec's io.gpuckpt.* annotations.
nlohmann::json checkpoint_image_annotations(const CheckpointInfo& info, const std::string& reference) {
  nlohmann::json annotations = {{"org.opencontainers.image.ref.name", reference}};
  for (const char* engine : {"io.kubernetes.cri-o.annotations", "io.kubernetes.containerd.annotations",
                             "io.podman.annotations"}) {
    const std::string prefix = std::string(engine) + ".checkpoint.";
    annotations[prefix + "name"] = info.container_name;
    annotations[prefix + "rawImageName"] = info.raw_image;
    annotations[prefix + "rootfsImageID"] = info.image_id;
    annotations[prefix + "rootfsImageName"] = info.image;
    annotations[prefix + "runtime.name"] = info.runtime;   // podman refuses an image without it
  }
  // the names of checkpointctl's lib/metadata
  const auto spec_annotations = info.spec.value("annotations", nlohmann::json::object());
  const auto spec_string = [&](std::initializer_list<const char*> keys) {
    for (const char* key : keys)
      if (spec_annotations.is_object() && spec_annotations.contains(key) && spec_annotations[key].is_string())
        return spec_annotations[key].get<std::string>();
    return std::string();
  };
  struct utsname host {};
  ::uname(&host);
  const std::map<std::string, std::string> criu = {
      {"org.criu.checkpoint.engine.name", info.engine},
      {"org.criu.checkpoint.container.name", info.container_name},
      {"org.criu.checkpoint.pod.name", spec_string({"io.kubernetes.pod.name", "io.kubernetes.cri.sandbox-name"})},
      {"org.criu.checkpoint.pod.namespace",
       spec_string({"io.kubernetes.pod.namespace", "io.kubernetes.cri.sandbox-namespace"})},
      {"org.criu.checkpoint.rootfsImageName", info.image},
      {"org.criu.checkpoint.rootfsImageID", info.image_id},
      {"org.criu.checkpoint.rawImageName", info.raw_image},
      {"org.criu.checkpoint.runtime.name", info.runtime},
      {"org.criu.checkpoint.host.arch", std::string(oci_architecture())},
      {"org.criu.checkpoint.host.kernel", host.release}};
  for (const auto& [key, value] : criu)
    if (!value.empty()) annotations[key] = value;
  for (const auto& [key, value] : spec_annotations.items())
    if (key.rfind("io.gpuckpt.", 0) == 0 && value.is_string()) annotations[key] = value;
  return annotations;
}

nlohmann::json image_manifest(const Blob& config, const LayerDigests& layer, nlohmann::json annotations) {
  return {{"schemaVersion", 2},
          {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
          {"config", {{"mediaType", "application/vnd.oci.image.config.v1+json"}, {"digest", config.digest},
                      {"size", config.size}}},
          {"layers", {{{"mediaType", layer_media_type(layer.filter)}, {"digest", layer.blob.digest},
                       {"size", layer.blob.size}}}},
          {"annotations", std::move(annotations)}};
}

// oci-layout and index.json, the files that make `dir` an OCI image layout of the one manifest.
Result<void> write_layout_index(const fs::path& dir, const Blob& manifest, const std::string& reference) {
  const nlohmann::json index = {
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.oci.image.index.v1+json"},
      {"manifests", {{{"mediaType", "application/vnd.oci.image.manifest.v1+json"}, {"digest", manifest.digest},
                      {"size", manifest.size},
                      {"annotations", {{"org.opencontainers.image.ref.name", reference}}}}}}};
  for (const auto& [name, text] : {std::pair<const char*, std::string>{"oci-layout", R"({"imageLayoutVersion":"1.0.0"})"},
                                   {"index.json", index.dump()}})
    GPUCKPT_TRY_VOID(write_file_atomically(dir / name, text));
  return {};
}

}  // namespace

Result<CheckpointImage> write_checkpoint_image(const fs::path& archive, const fs::path& layout,
                                               const std::string& reference, const ArchiveLimits& limits) {
  GPUCKPT_TRY(const auto info, inspect_checkpoint_archive(archive, limits));
  std::error_code ec;
  if (fs::exists(layout, ec)) return make_error(layout.string() + " exists already", EEXIST);
  const fs::path temp = layout.parent_path() / ("." + layout.filename().string() + ".partial");
  fs::remove_all(temp, ec);
  const fs::path blobs = temp / "blobs" / "sha256";
  fs::create_directories(blobs, ec);
  if (ec) return make_error("cannot create " + blobs.string() + ": " + ec.message(), EIO);
  struct Cleanup {
    fs::path dir;
    bool keep = false;
    ~Cleanup() {
      std::error_code e;
      if (!keep) fs::remove_all(dir, e);
    }
  } cleanup{temp};

  GPUCKPT_TRY(const auto layer, digest_layer(archive));
  GPUCKPT_TRY_VOID(place_layer(archive, blobs / layer.blob.digest.substr(7)));
  GPUCKPT_TRY(const auto config_blob, write_blob(blobs, image_config(info, layer).dump()));
  const auto manifest = image_manifest(config_blob, layer, checkpoint_image_annotations(info, reference));
  GPUCKPT_TRY(const auto manifest_blob, write_blob(blobs, manifest.dump()));
  GPUCKPT_TRY_VOID(write_layout_index(temp, manifest_blob, reference));
  fs::rename(temp, layout, ec);
  if (ec) return make_error("cannot rename " + temp.string() + " to " + layout.string() + ": " + ec.message(), EIO);
  cleanup.keep = true;
  return CheckpointImage{layout, reference, manifest_blob.digest};
}

}  // namespace gpuckpt
