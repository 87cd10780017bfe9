#include "node/registry_push.h"

#include <httplib.h>

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/json_reader.h"
#include "common/log.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxMetadataBytes = 1 << 20;   // index.json, a manifest

struct Repository {
  std::string host;   // host[:port]
  std::string name;   // path
};

Result<Repository> split_repository(const std::string& repository) {
  const auto slash = repository.find('/');
  if (repository.empty() || repository.size() > 255 || slash == std::string::npos || slash == 0 ||
      slash + 1 == repository.size())
    return make_error("image_registry.repository '" + repository.substr(0, 80) +
                      "' is not HOST[:PORT]/PATH (e.g. registry.example:5000/ml/checkpoints)");
  Repository r{repository.substr(0, slash), repository.substr(slash + 1)};
  for (char c : r.host)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':')
      return make_error("image_registry.repository: host '" + r.host + "' has a character outside [A-Za-z0-9.-:]");
  std::size_t start = 0;
  while (start <= r.name.size()) {
    const auto end = std::min(r.name.find('/', start), r.name.size());
    const std::string part = r.name.substr(start, end - start);
    bool ok = !part.empty() && std::isalnum(static_cast<unsigned char>(part.front())) &&
              std::isalnum(static_cast<unsigned char>(part.back()));
    for (char c : part)
      ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-');
    if (!ok)
      return make_error("image_registry.repository: path component '" + part +
                        "' must be lower-case letters, digits and . _ - (alphanumeric at both ends)");
    start = end + 1;
  }
  return r;
}

std::optional<std::string> read_small(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(kMaxMetadataBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxMetadataBytes) return std::nullopt;
  return text;
}

struct Blob {
  std::string digest;   // sha256:HEX
  std::uint64_t size = 0;
};

std::string percent_encoded(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

bool is_sha256(const std::string& digest) {
  if (digest.size() != 71 || digest.rfind("sha256:", 0) != 0) return false;
  for (std::size_t i = 7; i < digest.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(digest[i])) || std::isupper(static_cast<unsigned char>(digest[i])))
      return false;
  return true;
}

std::string registry_says(const httplib::Response& response) {
  return registry_error_text(response.status, response.body, response.get_header_value("WWW-Authenticate"));
}

using Clock = std::chrono::steady_clock;

// Runs `call` (a request on `client`) and stops `client` if it is still running at `deadline`: httplib's timeouts
// are per read, so an answer that trickles a byte every few seconds would otherwise hold the push for hours.
// `expired` tells the caller why the request failed.
template <typename Client, typename Call>
auto with_deadline(Client& client, Clock::time_point deadline, bool& expired, Call&& call) {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::thread guard([&] {
    std::unique_lock lock(mutex);
    if (finished.wait_until(lock, deadline, [&] { return done; })) return;
    expired = true;
    // stop() shuts the request's socket down, and it fails at once; one that came before the socket was open had
    // nothing to shut, so it is repeated until the request returns.
    do client.stop();
    while (!finished.wait_for(lock, std::chrono::milliseconds(100), [&] { return done; }));
  });
  auto result = call();
  {
    std::lock_guard lock(mutex);
    done = true;
  }
  finished.notify_one();
  guard.join();
  return result;
}

// One request to `who` (the registry or its token service) with its answer read as it streams, at most
// kMaxRegistryAnswerBytes of it, and ended at `deadline`.
Result<httplib::Response> bounded_send(httplib::Client& client, httplib::Request request, const std::string& who,
                                       Clock::time_point deadline, const std::string& deadline_setting) {
  std::string body;
  bool too_large = false;
  request.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
    if (body.size() + size > kMaxRegistryAnswerBytes) {
      too_large = true;
      return false;
    }
    body.append(data, size);
    return true;
  };
  bool expired = false;
  auto result = with_deadline(client, deadline, expired, [&] { return client.send(request); });
  if (expired)
    return make_error(who + " did not finish answering " + request.method + " " + request.path.substr(0, 120) +
                      " in time (" + deadline_setting + "); stopped", ETIMEDOUT);
  if (too_large)
    return make_error(who + " answered " + request.method + " with more than " +
                      std::to_string(kMaxRegistryAnswerBytes) + " bytes; refused", EFBIG);
  if (!result) return make_error("cannot reach " + who + ": " + httplib::to_string(result.error()), EIO);
  httplib::Response response = result.value();
  response.body = std::move(body);
  return response;
}

// The host[:port] of an http(s) URL; empty when it is none.
std::string url_host(const std::string& url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return {};
  const auto path_at = url.find('/', scheme_end + 3);
  return url.substr(scheme_end + 3, path_at == std::string::npos ? std::string::npos : path_at - scheme_end - 3);
}

class Pusher {
 public:
  Pusher(const RegistryOptions& options, Repository repository)
      : options_(options), repo_(std::move(repository)),
        client_((options.plain_http ? "http://" : "https://") + repo_.host),
        push_deadline_(Clock::now() + options.push_timeout) {
    client_.set_connection_timeout(10);
    client_.set_read_timeout(static_cast<time_t>(options.timeout.count()));
    client_.set_write_timeout(static_cast<time_t>(options.timeout.count()));
  }

  Result<void> push_blob(const fs::path& file, const Blob& blob) {
    const std::string path = "/v2/" + repo_.name + "/blobs/" + blob.digest;
    auto head = send([&] { return request("HEAD", path); });
    if (!head) return head.error();
    if (head->status == 200) {
      log::info("registry: " + blob.digest + " is there already");
      return {};
    }
    auto started = send([&] { return request("POST", "/v2/" + repo_.name + "/blobs/uploads/"); });
    if (!started) return started.error();
    if (started->status != 202)
      return make_error("starting the upload of " + blob.digest + " to " + repo_.host + " failed: " +
                        registry_says(*started), EIO);
    std::string location = started->get_header_value("Location");
    if (location.rfind("http://", 0) == 0 || location.rfind("https://", 0) == 0) {
      const auto path_at = location.find('/', location.find("//") + 2);
      if (url_host(location) != repo_.host)
        return make_error("the registry sent the upload to another host (" + log::escaped(location, 120) +
                          "); refused", EIO);
      location = path_at == std::string::npos ? "/" : location.substr(path_at);
    }
    if (location.empty() || location.front() != '/') return make_error("the registry gave no upload location", EIO);
    location += (location.find('?') == std::string::npos ? "?" : "&") + std::string("digest=") + blob.digest;
    auto in = std::make_shared<std::ifstream>(file, std::ios::binary);
    if (!*in) return make_error("cannot read " + file.string(), EIO);
    auto put = send([&] {
      in->clear();
      in->seekg(0);
      httplib::Request upload = request("PUT", location);
      upload.set_header("Content-Type", "application/octet-stream");
      // httplib's own Put(..., ContentProvider, ...) reads the whole answer; a request carries the same provider.
      upload.content_length_ = static_cast<std::size_t>(blob.size);
      upload.content_provider_ = [in](std::size_t offset, std::size_t length, httplib::DataSink& sink) {
        std::vector<char> buffer(std::min<std::size_t>(length, 1 << 20));
        in->seekg(static_cast<std::streamoff>(offset));
        in->read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        const auto got = static_cast<std::size_t>(in->gcount());
        if (got == 0) return false;
        return sink.write(buffer.data(), got);
      };
      return upload;
    });
    if (!put) return put.error();
    if (put->status != 201)
      return make_error("uploading " + blob.digest + " (" + std::to_string(blob.size) + " bytes) to " + repo_.host +
                        " failed: " + registry_says(*put), EIO);
    return {};
  }

  // The digest the registry says it stored the manifest under (Docker-Content-Digest): the only proof of what it
  // keeps, so an answer without one is a failure.
  Result<std::string> push_manifest(const std::string& manifest, const std::string& media_type, const std::string& tag) {
    auto put = send([&] {
      httplib::Request store = request("PUT", "/v2/" + repo_.name + "/manifests/" + tag);
      store.set_header("Content-Type", media_type);
      store.body = manifest;
      return store;
    });
    if (!put) return put.error();
    if (put->status != 201)
      return make_error("storing the manifest " + repo_.host + "/" + repo_.name + ":" + tag + " failed: " +
                        registry_says(*put), EIO);
    const std::string digest = put->get_header_value("Docker-Content-Digest");
    if (digest.empty())
      return make_error("the registry " + repo_.host + " stored the manifest without naming its digest "
                        "(no Docker-Content-Digest); cannot tell what it keeps, so the push counts as failed", EIO);
    return digest;
  }

 private:
  httplib::Request request(const std::string& method, const std::string& path) const {
    httplib::Request r;
    r.method = method;
    r.path = path;
    r.headers = headers_;
    return r;
  }

  Clock::time_point request_deadline() const { return std::min(Clock::now() + options_.timeout, push_deadline_); }

  Result<httplib::Response> exchange(httplib::Request r) {
    return bounded_send(client_, std::move(r), "the registry " + repo_.host, request_deadline(),
                        "image_registry.timeout_seconds per request, push_timeout_seconds per push");
  }

  // One request; on a first 401, again with what the challenge asks for (the request is made afresh by `make`, so
  // that it carries the new Authorization header).
  template <typename Make>
  Result<httplib::Response> send(Make&& make) {
    auto response = exchange(make());
    if (!response) return response.error();
    if (response->status == 401 && !authorized_) {
      const std::string challenge = response->get_header_value("WWW-Authenticate");
      if (challenge.rfind("Bearer ", 0) == 0) {
        auto token = bearer_token(challenge);
        if (!token) return token.error();
        headers_.emplace("Authorization", "Bearer " + token.value());
      } else if (challenge.rfind("Basic", 0) == 0) {
        auto credentials = read_credentials();
        if (!credentials) return credentials.error();
        const auto colon = credentials->find(':');
        headers_.insert(httplib::make_basic_authentication_header(credentials->substr(0, colon),
                                                                  credentials->substr(colon + 1)));
      } else {
        return make_error("the registry " + repo_.host + " wants '" + log::escaped(challenge, 120) +
                          "' authentication; gpuckpt knows Basic and Bearer (token)", EACCES);
      }
      authorized_ = true;
      response = exchange(make());
      if (!response) return response.error();
    }
    if (response->status == 401 || response->status == 403)
      return make_error("the registry " + repo_.host + " refused " + repo_.name + ": " + registry_says(*response) +
                        (options_.credentials_file.empty() ? " (no image_registry.credentials_file)" : ""), EACCES);
    return response;
  }

  // Token authentication (Docker Hub, GHCR, Harbor, distribution's `auth: token`): a token for pull and push on this
  // repository from the realm the challenge names, asked with the credentials when there are any.
  Result<std::string> bearer_token(const std::string& challenge) {
    const auto params = challenge_params(challenge.substr(7));
    const auto realm = params.find("realm");
    if (realm == params.end()) return make_error("the registry " + repo_.host + "'s Bearer challenge names no realm", EIO);
    const std::string& url = realm->second;
    const std::string shown = log::escaped(url, 120);
    const auto scheme_end = url.find("://");
    if (scheme_end == std::string::npos || (url.substr(0, scheme_end) != "http" && url.substr(0, scheme_end) != "https"))
      return make_error("the registry " + repo_.host + "'s token realm '" + shown + "' is not an http(s) URL", EIO);
    const std::string realm_host = url_host(url);
    if (!options_.token_realm_host.empty() && realm_host != options_.token_realm_host)
      return make_error("the registry " + repo_.host + " names the token realm " + shown + ", whose host is not " +
                        "image_registry.token_realm_host (" + options_.token_realm_host + "); no credentials sent",
                        EACCES);
    const auto path_at = url.find('/', scheme_end + 3);
    httplib::Client token_client(url.substr(0, path_at));
    token_client.set_connection_timeout(10);
    token_client.set_read_timeout(30);
    std::string path = path_at == std::string::npos ? "/" : url.substr(path_at);
    path += (path.find('?') == std::string::npos ? "?" : "&");
    if (auto service = params.find("service"); service != params.end()) path += "service=" + percent_encoded(service->second) + "&";
    path += "scope=" + percent_encoded("repository:" + repo_.name + ":pull,push");
    httplib::Request ask;
    ask.method = "GET";
    ask.path = path;
    if (!options_.credentials_file.empty()) {
      auto credentials = read_credentials();
      if (!credentials) return credentials.error();
      const auto colon = credentials->find(':');
      ask.headers.insert(
          httplib::make_basic_authentication_header(credentials->substr(0, colon), credentials->substr(colon + 1)));
    }
    const std::string who = "the token service " + shown;
    auto answer = bounded_send(token_client, std::move(ask), who, request_deadline(),
                               "image_registry.timeout_seconds per request, push_timeout_seconds per push");
    if (!answer) return answer.error();
    if (answer->status != 200)
      return make_error(who + " refused a push token for " + repo_.name + ": " + registry_says(answer.value()) +
                        (options_.credentials_file.empty() ? " (no image_registry.credentials_file)" : ""), EACCES);
    return token_from_answer(answer->body, who);
  }

  Result<std::string> read_credentials() const {
    if (options_.credentials_file.empty())
      return make_error("the registry " + repo_.host + " asks for credentials: set image_registry.credentials_file "
                        "(USER:PASSWORD)", EACCES);
    std::ifstream in(options_.credentials_file);
    std::string line;
    std::getline(in, line);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.find(':') == std::string::npos || line.size() > 1024)
      return make_error("image_registry.credentials_file " + options_.credentials_file + " does not hold USER:PASSWORD",
                        EINVAL);
    return line;
  }

  const RegistryOptions& options_;
  Repository repo_;
  httplib::Client client_;
  Clock::time_point push_deadline_;
  httplib::Headers headers_;
  bool authorized_ = false;
};

Result<Blob> blob_of(const nlohmann::json& descriptor, const char* what) {
  if (!descriptor.is_object() || !descriptor.contains("digest") || !descriptor["digest"].is_string() ||
      !descriptor.contains("size") || !descriptor["size"].is_number_unsigned())
    return make_error(std::string("the layout's ") + what + " has no digest or size");
  Blob b{descriptor["digest"].get<std::string>(), descriptor["size"].get<std::uint64_t>()};
  if (!is_sha256(b.digest)) return make_error(std::string("the layout's ") + what + " digest is not sha256:HEX");
  return b;
}

}  // namespace

// The parameters of an authentication challenge: realm="...",service="...",scope="..." (quoted or bare values).
std::map<std::string, std::string> challenge_params(std::string_view text) {
  std::map<std::string, std::string> params;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',')) ++i;
    const auto eq = text.find('=', i);
    if (eq == std::string_view::npos) break;
    std::string key(text.substr(i, eq - i));
    std::string value;
    i = eq + 1;
    if (i < text.size() && text[i] == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) value += text[i] == '\\' && i + 1 < text.size() ? text[++i] : text[i];
      ++i;
    } else {
      while (i < text.size() && text[i] != ',') value += text[i++];
    }
    params[key] = value;
  }
  return params;
}

Result<std::string> token_from_answer(std::string_view body, std::string_view service) {
  JsonLimits limits;
  limits.max_bytes = kMaxRegistryAnswerBytes;
  limits.max_depth = 8;
  auto json = parse_json(body, std::string(service) + "'s answer", limits);
  if (!json) return json.error();
  for (const char* key : {"token", "access_token"})
    if (json->is_object() && json->contains(key) && (*json)[key].is_string() && !(*json)[key].get<std::string>().empty()) {
      const std::string token = (*json)[key].get<std::string>();
      if (token.size() > 16384 || token.find_first_of("\r\n ") != std::string::npos)
        return make_error(std::string(service) + "'s token is not a single token", EIO);
      return token;
    }
  return make_error(std::string(service) + " answered without a token", EIO);
}

std::string registry_error_text(int status, std::string_view body, std::string_view challenge) {
  std::string what = "HTTP " + std::to_string(status);
  JsonLimits limits;
  limits.max_bytes = kMaxRegistryAnswerBytes;
  limits.max_depth = 8;
  if (auto json = parse_json(body, "the registry's answer", limits); json && json->is_object()) {
    if (auto it = json->find("errors"); it != json->end() && it->is_array() && !it->empty() && (*it)[0].is_object()) {
      const auto& e = (*it)[0];
      if (e.contains("code") && e["code"].is_string()) what += " " + log::escaped(e["code"].get<std::string>(), 64);
      if (e.contains("message") && e["message"].is_string()) what += ": " + log::escaped(e["message"].get<std::string>(), 200);
    }
  }
  if (status == 401) what += " (" + (challenge.empty() ? std::string("no challenge") : log::escaped(challenge, 200)) + ")";
  return what;
}

Result<void> check_repository(const std::string& repository) {
  auto split = split_repository(repository);
  if (!split) return split.error();
  return {};
}

Result<std::string> push_checkpoint_image(const RegistryOptions& options, const fs::path& layout, const std::string& tag) {
  auto repo = split_repository(options.repository);
  if (!repo) return repo.error();
  JsonLimits limits;
  limits.max_bytes = kMaxMetadataBytes;
  limits.max_depth = 8;
  const auto index_text = read_small(layout / "index.json");
  if (!index_text) return make_error("cannot read " + (layout / "index.json").string(), EIO);
  auto index = parse_json(*index_text, (layout / "index.json").string(), limits);
  if (!index) return index.error();
  if (!index->contains("manifests") || !(*index)["manifests"].is_array() || (*index)["manifests"].size() != 1)
    return make_error(layout.string() + " is not a checkpoint image layout (one manifest)");
  auto manifest_blob = blob_of((*index)["manifests"][0], "manifest");
  if (!manifest_blob) return manifest_blob.error();
  const fs::path blobs = layout / "blobs" / "sha256";
  const auto manifest_text = read_small(blobs / manifest_blob->digest.substr(7));
  if (!manifest_text) return make_error("cannot read the manifest of " + layout.string(), EIO);
  auto manifest = parse_json(*manifest_text, "the manifest of " + layout.string(), limits);
  if (!manifest) return manifest.error();
  std::vector<Blob> parts;
  if (auto config = blob_of(manifest->value("config", nlohmann::json()), "config"); config) parts.push_back(*config);
  else return config.error();
  if (!manifest->contains("layers") || !(*manifest)["layers"].is_array())
    return make_error("the manifest of " + layout.string() + " has no layers");
  for (const auto& layer : (*manifest)["layers"]) {
    auto b = blob_of(layer, "layer");
    if (!b) return b.error();
    parts.push_back(*b);
  }
  Pusher pusher(options, *repo);
  for (const auto& part : parts)
    if (auto pushed = pusher.push_blob(blobs / part.digest.substr(7), part); !pushed) return pushed.error();
  const std::string media_type = manifest->value("mediaType", std::string("application/vnd.oci.image.manifest.v1+json"));
  auto digest = pusher.push_manifest(*manifest_text, media_type, tag);
  if (!digest) return digest.error();
  const std::string stored = digest.value();
  if (stored != manifest_blob->digest)
    return make_error("the registry stored the manifest as " + log::escaped(stored, 80) + ", not " +
                      manifest_blob->digest + "; the push counts as failed", EIO);
  return options.repository + ":" + tag + "@" + stored;
}

}  // namespace gpuckpt::node
