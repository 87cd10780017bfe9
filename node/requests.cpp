#include "node/requests.h"

#include <set>

#include <nlohmann/json.hpp>

#include "base/json_reader.h"

namespace gpuckpt::node {

namespace {

// A JSON object with only `allowed` keys, all strings unless listed in `arrays` (arrays of strings).
Result<nlohmann::json> parse_body(std::string_view text, const std::set<std::string>& allowed,
                                  const std::set<std::string>& arrays = {}) {
  JsonLimits limits;
  limits.max_depth = 3;
  limits.max_values = 1024;
  auto parsed = parse_json(text, "the request body", limits);
  if (!parsed) return make_error(parsed.error().message);
  auto& body = parsed.value();
  if (!body.is_object()) return make_error("the request body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (!allowed.count(key)) {
      std::string keys;
      for (const auto& k : allowed) keys += (keys.empty() ? "" : ", ") + k;
      return make_error("unknown field '" + key.substr(0, 64) + "' (allowed: " + keys + ")");
    }
    if (arrays.count(key)) {
      if (!value.is_array()) return make_error("field '" + key + "' must be an array of strings");
      for (const auto& v : value)
        if (!v.is_string()) return make_error("field '" + key + "' must be an array of strings");
    } else if (!value.is_string()) {
      return make_error("field '" + key + "' must be a string");
    }
  }
  return body;
}

std::string string_field(const nlohmann::json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() ? std::string{} : it->get<std::string>();   // a string: parse_body checked
}

}  // namespace

Result<CheckpointRequest> parse_checkpoint_request(std::string_view text) {
  GPUCKPT_TRY(auto body, parse_body(text, {"namespace", "pod", "container", "image"}));
  CheckpointRequest request;
  request.ref.namespace_name = string_field(body, "namespace");
  request.ref.pod = string_field(body, "pod");
  request.ref.container = string_field(body, "container");
  request.image_tag = string_field(body, "image");
  return request;
}

Result<RestoreRequest> parse_restore_request(std::string_view text) {
  GPUCKPT_TRY(auto body, parse_body(text, {"archive", "name", "target_gpus"}, {"target_gpus"}));
  RestoreRequest request;
  request.archive = string_field(body, "archive");
  request.name = string_field(body, "name");
  if (auto it = body.find("target_gpus"); it != body.end()) {
    std::vector<std::string> gpus;
    for (const auto& g : *it) gpus.push_back(g.get<std::string>());
    request.target_gpus = std::move(gpus);
  }
  return request;
}

Result<ImageRequest> parse_image_request(std::string_view text) {
  GPUCKPT_TRY(auto body, parse_body(text, {"archive", "image"}));
  ImageRequest request;
  request.archive = string_field(body, "archive");
  request.tag = string_field(body, "image");
  return request;
}

Result<TransferRequest> parse_transfer_request(std::string_view text) {
  GPUCKPT_TRY(auto body, parse_body(text, {"archive", "to"}));
  TransferRequest request;
  request.archive = string_field(body, "archive");
  request.to = string_field(body, "to");
  if (request.archive.empty() || request.to.empty()) return make_error("a transfer needs 'archive' and 'to'");
  return request;
}

Result<ChunkPullRequest> parse_chunk_pull_request(std::string_view text) {
  GPUCKPT_TRY(auto body, parse_body(text, {"image"}));
  ChunkPullRequest request;
  request.image = string_field(body, "image");
  if (request.image.empty()) return make_error("a chunk pull needs 'image' (HOST[:PORT]/PATH:TAG)");
  return request;
}

}  // namespace gpuckpt::node
