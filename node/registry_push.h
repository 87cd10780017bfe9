// Pushes a checkpoint image (the OCI image layout write_checkpoint_image makes: index.json naming one manifest, its
// config and layer blobs) to a registry through the OCI distribution API, so any node (or a cluster without a
// shared store) can pull it: blobs the registry lacks are uploaded (HEAD, then POST + one PUT with the digest,
// streamed from the file), then the manifest is PUT under the tag. Authentication as the registry's 401 asks:
// HTTP Basic with `credentials_file` ("USER:PASSWORD" on one line), or a Bearer token for pull and push on the
// repository from the token service the challenge names (asked with the same credentials, or anonymously).
// A registry is not trusted with the agent's memory or time: every answer is read as it streams and refused past
// 1 MiB, every request ends at its deadline (timeout_seconds, whatever the registry trickles) and the whole push at
// push_timeout_seconds, and the manifest counts as pushed only when the registry names the digest it stored
// (Docker-Content-Digest) and that is the manifest's own.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "common/result.h"

namespace gpuckpt::node {

struct RegistryOptions {
  std::string repository;          // HOST[:PORT]/PATH, e.g. registry.example:5000/ml/checkpoints; empty: no push
  std::string credentials_file;    // USER:PASSWORD; empty: anonymous
  bool plain_http = false;         // http:// (a local registry); else https:// with the system's CAs
  std::chrono::seconds timeout{600};   // per request, in all (a layer is one request)
  std::chrono::seconds push_timeout{3600};   // the whole push
  // When set (HOST[:PORT]): the only host a Bearer challenge's token realm may name; credentials never go elsewhere.
  std::string token_realm_host;
};

// The largest answer read from a registry or its token service (an error text, a token, an upload's answer).
inline constexpr std::size_t kMaxRegistryAnswerBytes = 1 << 20;

// What a registry answers, parsed (also fed to fuzz/registry_fuzz): the parameters of a WWW-Authenticate
// challenge (realm="...",service="...": quoted or bare values), the token in a token service's JSON answer
// ("token" or "access_token"; one line, at most 16 KiB), and the short text an error answer makes.
std::map<std::string, std::string> challenge_params(std::string_view text);
Result<std::string> token_from_answer(std::string_view body, std::string_view service);
std::string registry_error_text(int status, std::string_view body, std::string_view challenge);

// Checks `repository`'s shape (host, optional port, lower-case path components); an error names what is wrong.
Result<void> check_repository(const std::string& repository);

// Pushes `layout` as REPOSITORY:TAG; returns "REPOSITORY:TAG@sha256:..." (the manifest digest the registry stored).
Result<std::string> push_checkpoint_image(const RegistryOptions& options, const std::filesystem::path& layout,
                                          const std::string& tag);

}  // namespace gpuckpt::node
