#include "node/chunk_transfer.h"

#include <httplib.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "common/checkpoint_export.h"
#include "common/gpu_image.h"
#include "common/gpu_manifest.h"
#include "common/log.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;
namespace cs = chunk_store;

Result<fs::path> agent_store_dir(const GpuMemoryConfig& config) {
  const std::string setting = config.store.value_or("inline");
  auto dir = gpu_image::parse_store(setting, "gpu_memory.store");
  if (!dir) return make_error(dir.error().message, EBUSY);
  if (dir->empty())
    return make_error("this agent keeps no chunk store (gpu_memory.store is " +
                      std::string(config.store ? "inline" : "unset, so inline") +
                      "): it cannot take store-backed checkpoints; set gpu_memory.store to node or a path "
                      "(the chart's gpuMemory.store)", EBUSY);
  return fs::path(*dir);
}

Result<nlohmann::json> missing_chunks(const GpuMemoryConfig& config, const nlohmann::json& body) {
  const std::string usage = "the body is {\"digests\": [at most " + std::to_string(kMaxMissingQuery) +
                            " distinct SHA-256 digests, 64 lowercase hex digits each]}";
  if (!body.is_object() || !body.contains("digests") || !body["digests"].is_array() || body.size() != 1)
    return make_error(usage);
  const auto& list = body["digests"];
  if (list.size() > kMaxMissingQuery)
    return make_error(std::to_string(list.size()) + " digests asked at once: " + usage, EFBIG);
  std::vector<cs::Digest> digests;
  std::set<cs::Digest> seen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) return make_error("digests[" + std::to_string(i) + "] is not a string: " + usage);
    auto digest = cs::parse_digest(list[i].get<std::string>(), "digests[" + std::to_string(i) + "]");
    if (!digest) return make_error(digest.error().message + ": " + usage);
    if (!seen.insert(*digest).second)
      return make_error("digests[" + std::to_string(i) + "] (" + digest->hex() + ") is asked twice: " + usage);
    digests.push_back(*digest);
  }
  auto dir = agent_store_dir(config);
  if (!dir) return dir.error();
  nlohmann::json missing = nlohmann::json::array();
  std::size_t present = 0;
  auto opened = cs::Store::open(*dir, false);
  if (!opened && opened.error().errno_value != ENOENT) return make_error(opened.error().message, EIO);
  for (const auto& digest : digests) {
    // stat reads the chunk's header: a file that is there but cut short or foreign counts as missing.
    if (opened && (*opened)->stat(digest) && (*opened)->touch(digest)) {
      ++present;
      continue;
    }
    missing.push_back(digest.hex());
  }
  return nlohmann::json{{"missing", std::move(missing)}, {"present", present}};
}

Result<nlohmann::json> admit_received_archive(const fs::path& received, const GpuMemoryConfig& config,
                                              const ArchiveLimits& limits) {
  auto info = inspect_checkpoint_archive(received, limits);
  if (!info) return make_error(info.error().message, info.error().errno_value == ETIMEDOUT ? ETIMEDOUT : EBADMSG);
  if (info->gpu_manifests.empty()) {
    if (info->carried_chunks > 0)
      return make_error("it carries " + std::to_string(info->carried_chunks) + " chunks (" + kCarriedChunksDir +
                        "/) but no manifest that names them", EBADMSG);
    return nlohmann::json(nullptr);
  }
  auto dir = agent_store_dir(config);
  if (!dir) return make_error("it is a store-backed checkpoint and " + dir.error().message, EBADMSG);
  auto opened = cs::Store::open(*dir, true);
  if (!opened) return make_error(opened.error().message, EIO);
  std::shared_ptr<cs::Store> store(std::move(*opened));
  // The archive's doing (a chunk corrupt, missing, unnamed) is EBADMSG or EINVAL/ENOENT from checkpoint_export: the
  // received file is refused for it. Time and the store's own trouble keep their kinds.
  const auto kind = [](const Error& e) {
    return e.errno_value == ETIMEDOUT || e.errno_value == EIO || e.errno_value == ENOSPC ? e.errno_value : EBADMSG;
  };
  auto report = info->carried_chunks > 0 ? checkpoint_export::import_checkpoint(received, store, received, limits)
                                         : checkpoint_export::reference_checkpoint(received, store, limits);
  if (!report) return make_error(report.error().message, kind(report.error()));
  return nlohmann::json{{"store", dir->string()},
                        {"manifests", report->manifests},
                        {"carried_chunks", report->carried_chunks},
                        {"added_chunks", report->added_chunks},
                        {"added_bytes", report->added_bytes},
                        {"present_chunks", report->present_chunks},
                        {"references", report->references}};
}

Result<std::set<cs::Digest>> manifest_chunks(const fs::path& archive, const ArchiveLimits& limits) {
  auto info = inspect_checkpoint_archive(archive, limits);
  if (!info) return info.error();
  std::set<cs::Digest> out;
  for (const auto& [name, text] : info->gpu_manifests) {
    auto manifest = gpu_image::parse_manifest(text, archive.string() + ": checkpoint/" + name);
    if (!manifest) return make_error(manifest.error().message, EBADMSG);
    for (std::size_t i = 0; i < manifest->entries.size(); ++i)
      if (manifest->entries[i].encoding != gpu_image::Encoding::Zero) out.insert(manifest->digests[i]);
  }
  return out;
}

Result<std::set<cs::Digest>> ask_missing_chunks(const std::string& url, const std::string& token,
                                                const std::set<cs::Digest>& digests, JobDeadline deadline) {
  httplib::Client client(url);
  client.set_bearer_token_auth(token.c_str());
  client.set_connection_timeout(5);
  client.set_read_timeout(30);
  client.set_write_timeout(30);
  std::set<cs::Digest> missing;
  std::vector<cs::Digest> batch;
  const auto ask = [&]() -> Result<void> {
    if (std::chrono::steady_clock::now() >= deadline)
      return make_error("ran out of time asking " + url + " which chunks it lacks", ETIMEDOUT);
    nlohmann::json list = nlohmann::json::array();
    for (const auto& d : batch) list.push_back(d.hex());
    auto answer = client.Post("/v1/chunks/missing", nlohmann::json{{"digests", std::move(list)}}.dump(),
                              "application/json");
    if (!answer) return make_error("the target agent at " + url + " (POST /v1/chunks/missing): " +
                                   httplib::to_string(answer.error()), EIO);
    const auto body = nlohmann::json::parse(answer->body, nullptr, false);
    if (answer->status != 200) {
      std::string why = "answered " + std::to_string(answer->status);
      if (body.is_object() && body.contains("error") && body["error"].is_object())
        why += ": " + body["error"].value("message", std::string());
      return make_error("the target agent at " + url + " (POST /v1/chunks/missing) " + why,
                        answer->status == 409 ? EBUSY : EIO);
    }
    if (!body.is_object() || !body.contains("missing") || !body["missing"].is_array())
      return make_error("the target agent at " + url + " answered POST /v1/chunks/missing without \"missing\"", EIO);
    const std::set<cs::Digest> asked(batch.begin(), batch.end());
    for (const auto& item : body["missing"]) {
      auto digest = item.is_string() ? cs::parse_digest(item.get<std::string>(), "missing digest")
                                     : Result<cs::Digest>(make_error("not a string"));
      // Only what was asked: a confused or hostile target cannot make the sender carry anything else.
      if (!digest || !asked.contains(*digest))
        return make_error("the target agent at " + url + " answered a digest it was not asked about", EIO);
      missing.insert(*digest);
    }
    batch.clear();
    return {};
  };
  for (const auto& digest : digests) {
    batch.push_back(digest);
    if (batch.size() == kMaxMissingQuery)
      if (auto ok = ask(); !ok) return ok.error();
  }
  if (!batch.empty())
    if (auto ok = ask(); !ok) return ok.error();
  return missing;
}

}  // namespace gpuckpt::node
