#include "node/registry_client.h"

#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>

#include "base/json_reader.h"
#include "base/log.h"
#include "node/bounded_request.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

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

// The host[:port] of an http(s) URL; empty when it is none.
std::string url_host(const std::string& url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return {};
  const auto path_at = url.find('/', scheme_end + 3);
  return url.substr(scheme_end + 3, path_at == std::string::npos ? std::string::npos : path_at - scheme_end - 3);
}

constexpr const char* kDeadlineSettings = "image_registry.timeout_seconds per request, push_timeout_seconds in all";

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
  GPUCKPT_TRY(auto json, parse_json(body, std::string(service) + "'s answer", limits));
  for (const char* key : {"token", "access_token"})
    if (json.is_object() && json.contains(key) && json[key].is_string() && !json[key].get<std::string>().empty()) {
      const std::string token = json[key].get<std::string>();
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

Result<Repository> split_repository(const std::string& repository) {
  const auto slash = repository.find('/');
  if (repository.empty() || repository.size() > 255 || slash == std::string::npos || slash == 0 ||
      slash + 1 == repository.size())
    return make_error("image_registry.repository '" + log::escaped(repository, 80) +
                      "' is not HOST[:PORT]/PATH (e.g. registry.example:5000/ml/checkpoints)");
  Repository r{repository.substr(0, slash), repository.substr(slash + 1)};
  for (char c : r.host)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':')
      return make_error("image_registry.repository: host '" + log::escaped(r.host, 80) +
                        "' has a character outside [A-Za-z0-9.-:]");
  std::size_t start = 0;
  while (start <= r.name.size()) {
    const auto end = std::min(r.name.find('/', start), r.name.size());
    const std::string part = r.name.substr(start, end - start);
    bool ok = !part.empty() && std::isalnum(static_cast<unsigned char>(part.front())) &&
              std::isalnum(static_cast<unsigned char>(part.back()));
    for (char c : part)
      ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-');
    if (!ok)
      return make_error("image_registry.repository: path component '" + log::escaped(part, 80) +
                        "' must be lower-case letters, digits and . _ - (alphanumeric at both ends)");
    start = end + 1;
  }
  return r;
}

Result<void> check_repository(const std::string& repository) {
  GPUCKPT_TRY_VOID(split_repository(repository));
  return {};
}

bool is_sha256(std::string_view digest) {
  if (digest.size() != 71 || digest.substr(0, 7) != "sha256:") return false;
  for (std::size_t i = 7; i < digest.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(digest[i])) || std::isupper(static_cast<unsigned char>(digest[i])))
      return false;
  return true;
}

RegistryClient::RegistryClient(const RegistryOptions& options, Repository repository, std::string scope,
                               Clock::time_point deadline)
    : options_(options), repo_(std::move(repository)), scope_(std::move(scope)),
      client_(std::make_unique<httplib::Client>((options.plain_http ? "http://" : "https://") + repo_.host)),
      deadline_(deadline) {
  client_->set_connection_timeout(10);
  client_->set_read_timeout(static_cast<time_t>(options.timeout.count()));
  client_->set_write_timeout(static_cast<time_t>(options.timeout.count()));
}

std::unique_ptr<RegistryClient> RegistryClient::sibling() const {
  auto other = std::make_unique<RegistryClient>(options_, repo_, scope_, deadline_);
  other->headers_ = headers_;
  other->authorized_ = authorized_;
  return other;
}

httplib::Request RegistryClient::request(const std::string& method, const std::string& path) const {
  httplib::Request r;
  r.method = method;
  r.path = path;
  r.headers = headers_;
  return r;
}

Clock::time_point RegistryClient::request_deadline() const {
  return std::min(Clock::now() + options_.timeout, deadline_);
}

std::string RegistryClient::says(const httplib::Response& response) const {
  return registry_error_text(response.status, response.body, response.get_header_value("WWW-Authenticate"));
}

Result<httplib::Response> RegistryClient::exchange(httplib::Request r, const Sink& sink) {
  return bounded_send(*client_, std::move(r), "the registry " + repo_.host, request_deadline(), kDeadlineSettings,
                      kMaxRegistryAnswerBytes, sink, options_.stop);
}

// One request; on a first 401, again with what the challenge asks for (the request is made afresh by `make`, so
// that it carries the new Authorization header).
Result<httplib::Response> RegistryClient::send(const std::function<httplib::Request()>& make, const Sink& sink) {
  GPUCKPT_TRY(auto response, exchange(make(), sink));
  if (response.status == 401 && !authorized_) {
    const std::string challenge = response.get_header_value("WWW-Authenticate");
    if (challenge.rfind("Bearer ", 0) == 0) {
      GPUCKPT_TRY(auto token, bearer_token(challenge));
      headers_.emplace("Authorization", "Bearer " + token);
    } else if (challenge.rfind("Basic", 0) == 0) {
      GPUCKPT_TRY(auto credentials, read_credentials());
      const auto colon = credentials.find(':');
      headers_.insert(httplib::make_basic_authentication_header(credentials.substr(0, colon),
                                                                credentials.substr(colon + 1)));
    } else {
      return make_error("the registry " + repo_.host + " wants '" + log::escaped(challenge, 120) +
                        "' authentication; gpuckpt knows Basic and Bearer (token)", EACCES);
    }
    authorized_ = true;
    GPUCKPT_TRY(response, exchange(make(), sink));
  }
  if (response.status == 401 || response.status == 403)
    return make_error("the registry " + repo_.host + " refused " + repo_.name + ": " + says(response) +
                      (options_.credentials_file.empty() ? " (no image_registry.credentials_file)" : ""), EACCES);
  return response;
}

// Token authentication (Docker Hub, GHCR, Harbor, distribution's `auth: token`): a token for the scope on this
// repository from the realm the challenge names, asked with the credentials when there are any.
Result<std::string> RegistryClient::bearer_token(const std::string& challenge) {
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
  if (auto service = params.find("service"); service != params.end())
    path += "service=" + percent_encoded(service->second) + "&";
  path += "scope=" + percent_encoded("repository:" + repo_.name + ":" + scope_);
  httplib::Request ask;
  ask.method = "GET";
  ask.path = path;
  if (!options_.credentials_file.empty()) {
    GPUCKPT_TRY(auto credentials, read_credentials());
    const auto colon = credentials.find(':');
    ask.headers.insert(
        httplib::make_basic_authentication_header(credentials.substr(0, colon), credentials.substr(colon + 1)));
  }
  const std::string who = "the token service " + shown;
  GPUCKPT_TRY(auto answer, bounded_send(token_client, std::move(ask), who, request_deadline(), kDeadlineSettings,
                                        kMaxRegistryAnswerBytes, nullptr, options_.stop));
  if (answer.status != 200)
    return make_error(who + " refused a " + (scope_ == "pull" ? "pull" : "push") + " token for " + repo_.name + ": " +
                      says(answer) +
                      (options_.credentials_file.empty() ? " (no image_registry.credentials_file)" : ""), EACCES);
  return token_from_answer(answer.body, who);
}

Result<std::string> RegistryClient::read_credentials() const {
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

Result<bool> RegistryClient::has_blob(const std::string& digest) {
  GPUCKPT_TRY(auto head, send([&] { return request("HEAD", "/v2/" + repo_.name + "/blobs/" + digest); }));
  return head.status == 200;
}

Result<void> RegistryClient::upload_blob(const std::string& digest, std::uint64_t size, BlobReader read) {
  GPUCKPT_TRY(auto started, send([&] { return request("POST", "/v2/" + repo_.name + "/blobs/uploads/"); }));
  if (started.status != 202)
    return make_error("starting the upload of " + digest + " to " + repo_.host + " failed: " + says(started), EIO);
  std::string location = started.get_header_value("Location");
  if (location.rfind("http://", 0) == 0 || location.rfind("https://", 0) == 0) {
    const auto path_at = location.find('/', location.find("//") + 2);
    if (url_host(location) != repo_.host)
      return make_error("the registry sent the upload to another host (" + log::escaped(location, 120) +
                        "); refused", EIO);
    location = path_at == std::string::npos ? "/" : location.substr(path_at);
  }
  if (location.empty() || location.front() != '/') return make_error("the registry gave no upload location", EIO);
  location += (location.find('?') == std::string::npos ? "?" : "&") + std::string("digest=") + digest;
  GPUCKPT_TRY(auto put, send([&] {
    httplib::Request upload = request("PUT", location);
    upload.set_header("Content-Type", "application/octet-stream");
    // httplib's own Put(..., ContentProvider, ...) reads the whole answer; a request carries the same provider.
    upload.content_length_ = static_cast<std::size_t>(size);
    upload.content_provider_ = [read](std::size_t offset, std::size_t length, httplib::DataSink& sink) {
      std::vector<char> buffer(std::min<std::size_t>(length, 1 << 20));
      const std::size_t got = read(offset, buffer);
      if (got == 0) return false;
      return sink.write(buffer.data(), got);
    };
    return upload;
  }));
  if (put.status != 201)
    return make_error("uploading " + digest + " (" + std::to_string(size) + " bytes) to " + repo_.host + " failed: " +
                      says(put), EIO);
  return {};
}

Result<void> RegistryClient::push_blob_file(const fs::path& file, const std::string& digest, std::uint64_t size) {
  GPUCKPT_TRY(auto there, has_blob(digest));
  if (there) {
    log::info("registry: " + digest + " is there already");
    return {};
  }
  auto in = std::make_shared<std::ifstream>(file, std::ios::binary);
  if (!*in) return make_error("cannot read " + file.string(), EIO);
  return upload_blob(digest, size, [in](std::uint64_t offset, std::span<char> buffer) -> std::size_t {
    in->clear();
    in->seekg(static_cast<std::streamoff>(offset));
    in->read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    return static_cast<std::size_t>(in->gcount());
  });
}

Result<std::string> RegistryClient::push_manifest(const std::string& manifest, const std::string& media_type,
                                                  const std::string& reference) {
  GPUCKPT_TRY(auto put, send([&] {
    httplib::Request store = request("PUT", "/v2/" + repo_.name + "/manifests/" + reference);
    store.set_header("Content-Type", media_type);
    store.body = manifest;
    return store;
  }));
  if (put.status != 201)
    return make_error("storing the manifest " + repo_.host + "/" + repo_.name + ":" + reference + " failed: " +
                      says(put), EIO);
  const std::string digest = put.get_header_value("Docker-Content-Digest");
  if (digest.empty())
    return make_error("the registry " + repo_.host + " stored the manifest without naming its digest "
                      "(no Docker-Content-Digest); cannot tell what it keeps, so the push counts as failed", EIO);
  return digest;
}

Result<RegistryClient::Manifest> RegistryClient::get_manifest(const std::string& reference, const std::string& accept,
                                                              std::size_t max_bytes) {
  std::string text;
  bool too_large = false;
  const std::string what = repo_.host + "/" + repo_.name + ":" + reference;
  GPUCKPT_TRY(auto got, send(
      [&] {
        text.clear();
        httplib::Request get = request("GET", "/v2/" + repo_.name + "/manifests/" + reference);
        get.set_header("Accept", accept);
        return get;
      },
      [&](const char* data, std::size_t size) {
        too_large = text.size() + size > max_bytes;
        if (!too_large) text.append(data, size);
        return !too_large;
      }));
  if (too_large)
    return make_error("the manifest " + what + " is larger than " + std::to_string(max_bytes) + " bytes; refused",
                      EFBIG);
  if (got.status == 404) return make_error("the registry has no manifest " + what + ": " + says(got), ENOENT);
  if (got.status != 200) return make_error("reading the manifest " + what + " failed: " + says(got), EIO);
  return Manifest{std::move(text), got.get_header_value("Docker-Content-Digest")};
}

Result<void> RegistryClient::get_blob(const std::string& digest, std::uint64_t size, std::vector<std::byte>& out) {
  bool too_large = false;
  const auto sink = [&](const char* data, std::size_t n) {
    too_large = out.size() + n > size;
    if (too_large) return false;
    const auto* bytes = reinterpret_cast<const std::byte*>(data);
    out.insert(out.end(), bytes, bytes + n);
    return true;
  };
  const std::string what = "blob " + digest + " of " + repo_.host + "/" + repo_.name;
  out.clear();
  out.reserve(static_cast<std::size_t>(size));
  GPUCKPT_TRY(auto got, send([&] {
    out.clear();
    return request("GET", "/v2/" + repo_.name + "/blobs/" + digest);
  }, sink));
  // A registry keeping blobs elsewhere (S3, GCS) redirects to a signed URL: followed once, with none of this
  // registry's headers (its credentials are for it alone).
  if (!too_large && (got.status == 307 || got.status == 302 || got.status == 303 || got.status == 301)) {
    const std::string location = got.get_header_value("Location");
    const auto scheme_end = location.find("://");
    const std::string scheme = scheme_end == std::string::npos ? "" : location.substr(0, scheme_end);
    if (scheme != "https" && !(scheme == "http" && options_.plain_http))
      return make_error("the registry redirected " + what + " to '" + log::escaped(location, 120) + "', not an " +
                        (options_.plain_http ? "http(s)" : "https") + " URL; refused", EIO);
    const auto path_at = location.find('/', scheme_end + 3);
    httplib::Client storage(location.substr(0, path_at));
    storage.set_connection_timeout(10);
    storage.set_read_timeout(static_cast<time_t>(options_.timeout.count()));
    httplib::Request get;
    get.method = "GET";
    get.path = path_at == std::string::npos ? "/" : location.substr(path_at);
    out.clear();
    GPUCKPT_TRY(got, bounded_send(storage, std::move(get),
                                  "the registry's storage " + log::escaped(url_host(location), 80),
                                  request_deadline(), kDeadlineSettings, kMaxRegistryAnswerBytes, sink,
                                  options_.stop));
  }
  if (too_large)
    return make_error("the registry sent more than the " + std::to_string(size) + " bytes " + what +
                      " has by its descriptor; refused", EFBIG);
  if (got.status != 200) return make_error("reading " + what + " failed: " + says(got), EIO);
  if (out.size() != size)
    return make_error("the registry sent " + std::to_string(out.size()) + " bytes of " + what + ", its descriptor "
                      "says " + std::to_string(size) + "; refused", EIO);
  return {};
}

}  // namespace gpuckpt::node
