// One conversation with an OCI distribution registry (the image push, registry_push.h; chunk blobs, registry_chunks.h):
// blobs asked for (HEAD), uploaded (POST + one PUT with the digest), downloaded; manifests stored and read.
// Authentication as the registry's 401 asks: HTTP Basic with `credentials_file` ("USER:PASSWORD" on one line), or
// a Bearer token for the scope asked (pull, or pull and push) on the repository from the token service the
// challenge names (asked with the same credentials, or anonymously).
// A registry is not trusted with the agent's memory or time: every answer is read as it streams and refused past
// its bound (1 MiB for texts; a blob's size as its descriptor says), every request ends at its deadline
// (timeout_seconds, whatever the registry trickles) and the whole conversation at push_timeout_seconds.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "node/bounded_request.h"

namespace gpuckpt::node {

struct RegistryOptions {
  std::string repository;          // HOST[:PORT]/PATH, e.g. registry.example:5000/ml/checkpoints; empty: no push
  std::string credentials_file;    // USER:PASSWORD; empty: anonymous
  bool plain_http = false;         // http:// (a local registry); else https:// with the system's CAs
  std::chrono::seconds timeout{600};   // per request, in all (a layer is one request)
  std::chrono::seconds push_timeout{3600};   // the whole push (or pull)
  // When set (HOST[:PORT]): the only host a Bearer challenge's token realm may name; credentials never go elsewhere.
  std::string token_realm_host;
  // Chunk blobs moved at the same time (registry_chunks.h), each on its own connection.
  std::size_t chunk_streams = 4;
  // Not configured: the agent's stop, given by a job, which ends every request of the push or pull early (null: none).
  const RequestStop* stop = nullptr;
};

// The largest answer read from a registry or its token service (an error text, a token, an upload's answer).
inline constexpr std::size_t kMaxRegistryAnswerBytes = 1 << 20;

// What a registry answers, parsed (also fed to fuzz/registry_fuzz): the parameters of a WWW-Authenticate
// challenge (realm="...",service="...": quoted or bare values), the token in a token service's JSON answer
// ("token" or "access_token"; one line, at most 16 KiB), and the short text an error answer makes.
std::map<std::string, std::string> challenge_params(std::string_view text);
Result<std::string> token_from_answer(std::string_view body, std::string_view service);
std::string registry_error_text(int status, std::string_view body, std::string_view challenge);

struct Repository {
  std::string host;   // host[:port]
  std::string name;   // path
};
// Checks `repository`'s shape (host, optional port, lower-case path components); an error names what is wrong.
Result<Repository> split_repository(const std::string& repository);
Result<void> check_repository(const std::string& repository);
// "sha256:" and 64 lowercase hex digits.
bool is_sha256(std::string_view digest);

class RegistryClient {
 public:
  using Clock = std::chrono::steady_clock;
  // `scope`: what a Bearer token is asked for ("pull,push" or "pull"). Every request ends by `deadline` too.
  RegistryClient(const RegistryOptions& options, Repository repository, std::string scope, Clock::time_point deadline);
  // Another connection to the same repository with this one's authorization (no second challenge): for blobs moved
  // in parallel.
  std::unique_ptr<RegistryClient> sibling() const;

  const Repository& repository() const { return repo_; }
  // Whether the registry has the blob (HEAD 200).
  Result<bool> has_blob(const std::string& digest);
  // Uploads `size` bytes from `read(offset, buffer)` (which answers how many it put into `buffer`, 0 at the end) as
  // `digest`: POST, then one PUT with the digest.
  using BlobReader = std::function<std::size_t(std::uint64_t offset, std::span<char> buffer)>;
  Result<void> upload_blob(const std::string& digest, std::uint64_t size, BlobReader read);
  // has_blob, then upload_blob of the file when the registry lacks it.
  Result<void> push_blob_file(const std::filesystem::path& file, const std::string& digest, std::uint64_t size);
  // Stores `manifest` under `reference` (a tag); the digest the registry says it stored it under
  // (Docker-Content-Digest): the only proof of what it keeps, so an answer without one is a failure.
  Result<std::string> push_manifest(const std::string& manifest, const std::string& media_type,
                                    const std::string& reference);
  // The manifest under `reference` (a tag or digest), at most `max_bytes`, with the registry's Docker-Content-Digest
  // (empty when it named none).
  struct Manifest {
    std::string text;
    std::string digest;
  };
  Result<Manifest> get_manifest(const std::string& reference, const std::string& accept, std::size_t max_bytes);
  // The blob `digest`, which must be exactly `size` bytes (more is refused as it streams), into `out`. A redirect to
  // another host (a registry's storage) is followed once, without this registry's credentials. The bytes are not
  // checked here: the caller hashes them.
  Result<void> get_blob(const std::string& digest, std::uint64_t size, std::vector<std::byte>& out);

 private:
  httplib::Request request(const std::string& method, const std::string& path) const;
  Clock::time_point request_deadline() const;
  using Sink = std::function<bool(const char*, std::size_t)>;
  Result<httplib::Response> exchange(httplib::Request r, const Sink& sink = nullptr);
  Result<httplib::Response> send(const std::function<httplib::Request()>& make, const Sink& sink = nullptr);
  Result<std::string> bearer_token(const std::string& challenge);
  Result<std::string> read_credentials() const;
  std::string says(const httplib::Response& response) const;

  const RegistryOptions& options_;
  Repository repo_;
  std::string scope_;
  std::unique_ptr<httplib::Client> client_;
  Clock::time_point deadline_;
  httplib::Headers headers_;
  bool authorized_ = false;
};

}  // namespace gpuckpt::node
