#include "node/archive_transfer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

// The low-level SHA-256 calls keep a context across requests (a transfer's bytes arrive in many PUTs).
#define OPENSSL_API_COMPAT 10101
#include <openssl/sha.h>

#include <httplib.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/json_reader.h"
#include "base/log.h"
#include "node/bounded_request.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIncomingSuffix = ".incoming";
constexpr auto kIdlePartial = std::chrono::hours(1);
constexpr int kMaxCommits = 20;   // commits of one push that the target answers "not yet" (409)

std::string hex_of(const unsigned char* digest) {
  static constexpr const char* kHex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < SHA256_DIGEST_LENGTH; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

std::string hex_digest(const SHA256_CTX& ctx) {
  SHA256_CTX copy = ctx;   // Final ends a context; the running one goes on
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256_Final(digest, &copy);
  return hex_of(digest);
}

bool is_sha256_hex(std::string_view text) {
  return text.size() == 64 && text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

Result<std::uint64_t> parse_count(std::string_view text, const char* what) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string_view::npos)
    return make_error(std::string("'") + what + "' must be a byte count, got '" + log::escaped(text, 32) + "'");
  return std::stoull(std::string(text));
}

// Hashes the first `length` bytes of `fd` into `ctx` (a restarted agent picking up a partial transfer).
Result<void> hash_prefix(int fd, std::uint64_t length, SHA256_CTX& ctx, JobDeadline deadline = kNoDeadline) {
  std::vector<char> buffer(1U << 20);
  std::uint64_t done = 0;
  while (done < length) {
    if (std::chrono::steady_clock::now() >= deadline) return make_error("ran out of time hashing", ETIMEDOUT);
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), length - done));
    const ssize_t n = ::pread(fd, buffer.data(), want, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error(std::string("read failed: ") + (n < 0 ? std::strerror(errno) : "file shorter than expected"), EIO);
    SHA256_Update(&ctx, buffer.data(), static_cast<std::size_t>(n));
    done += static_cast<std::uint64_t>(n);
  }
  return {};
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Result<void> sync_directory(const fs::path& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0)
    return make_error("cannot sync " + dir.string() + ": " + std::strerror(errno), EIO);
  return {};
}

struct CommitRequest {
  std::uint64_t size = 0;
  std::string sha256;
  bool store_backed = false;
};

Result<CommitRequest> parse_commit_request(const nlohmann::json& body) {
  if (!body.is_object() || !body.contains("size") || !body["size"].is_number_unsigned() || !body.contains("sha256") ||
      !body["sha256"].is_string() || !is_sha256_hex(body["sha256"].get<std::string>()))
    return make_error("a commit is {\"size\": BYTES, \"sha256\": \"64 lowercase hex digits\"[, \"store_backed\": "
                      "true]}");
  if (body.contains("store_backed") && !body["store_backed"].is_boolean())
    return make_error("a commit's \"store_backed\" is true or false");
  return CommitRequest{body["size"].get<std::uint64_t>(), body["sha256"].get<std::string>(),
                       body.value("store_backed", false)};
}

}  // namespace

bool is_transfer_name(std::string_view name) {
  if (name.empty() || name.size() > 200) return false;
  if (name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != std::string_view::npos)
    return false;
  if (!std::isalnum(static_cast<unsigned char>(name.front()))) return false;
  for (std::string_view ending : {".tar", ".tar.gz", ".tar.zst"})
    if (name.size() > ending.size() && name.substr(name.size() - ending.size()) == ending) return true;
  return false;
}

// One transfer being received: its running hash over the bytes the partial file holds.
struct IncomingArchives::Partial {
  SHA256_CTX hash{};
  std::uint64_t hashed = 0;   // bytes of the file the hash covers; differs from the file only after a restart
  bool busy = false;          // a PUT or commit is working on it
  Partial() { SHA256_Init(&hash); }
  // The hash brought up to the file's `held` bytes (after an agent restart it covers none of them: read them again).
  Result<void> cover(int fd, std::uint64_t held) {
    if (hashed == held) return {};
    SHA256_Init(&hash);
    hashed = 0;
    if (auto read = hash_prefix(fd, held, hash); !read) return read;
    hashed = held;
    return {};
  }
};

IncomingArchives::IncomingArchives(fs::path dir, std::uint64_t max_archive_bytes, Admit admit)
    : dir_(std::move(dir)), max_archive_bytes_(max_archive_bytes), admit_(std::move(admit)) {}

fs::path IncomingArchives::partial_path(const std::string& name) const {
  return dir_ / ("." + name + kIncomingSuffix);
}

Result<void> IncomingArchives::make_room() {
  std::size_t count = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.size() <= std::strlen(kIncomingSuffix) + 1 || file.front() != '.' ||
        !file.ends_with(kIncomingSuffix))
      continue;
    const std::string name = file.substr(1, file.size() - 1 - std::strlen(kIncomingSuffix));
    const auto known = partials_.find(name);
    const bool busy = known != partials_.end() && known->second->busy;
    std::error_code time_ec;
    const auto written = fs::last_write_time(entry.path(), time_ec);
    if (!busy && !time_ec && now - written > kIdlePartial) {
      log::info("transfer: removing " + log::escaped(file) + ", idle for over an hour");
      fs::remove(entry.path(), time_ec);
      if (known != partials_.end()) partials_.erase(known);
      continue;
    }
    ++count;
  }
  if (count >= kMaxIncoming)
    return make_error("the agent already receives " + std::to_string(count) + " archives (at most " +
                      std::to_string(kMaxIncoming) + " at once); retry when one has finished", EAGAIN);
  return {};
}

Result<nlohmann::json> IncomingArchives::state(const std::string& name) {
  if (!is_transfer_name(name))
    return make_error("'" + log::escaped(name, 64) + "' is not an archive file name ([A-Za-z0-9._-], ending .tar, "
                      ".tar.gz or .tar.zst)");
  struct stat st{};
  const std::uint64_t received =
      ::lstat(partial_path(name).c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<std::uint64_t>(st.st_size) : 0;
  const bool present = ::lstat((dir_ / name).c_str(), &st) == 0;
  return nlohmann::json{{"name", name}, {"received_bytes", received}, {"present", present}};
}

Result<std::shared_ptr<IncomingArchives::Partial>> IncomingArchives::claim_for_piece(const std::string& name) {
  std::lock_guard lock(mutex_);
  struct stat st{};
  if (::lstat((dir_ / name).c_str(), &st) == 0)
    return make_error("this node already has an archive named " + name + ": commit to compare it, or remove it", EBUSY);
  auto& slot = partials_[name];
  if (slot && slot->busy) return make_error("another transfer of " + name + " is in progress", EBUSY);
  if (!slot && ::lstat(partial_path(name).c_str(), &st) != 0) {
    if (auto room = make_room(); !room) {
      partials_.erase(name);
      return room.error();
    }
  }
  if (!slot) slot = std::make_shared<Partial>();
  slot->busy = true;
  return slot;
}

Result<nlohmann::json> IncomingArchives::receive(const std::string& name, std::string_view offset_text,
                                                 std::string_view total_text, const BodyReader& read_body) {
  if (!is_transfer_name(name)) return state(name).error();
  GPUCKPT_TRY(auto offset, parse_count(offset_text, "offset"));
  GPUCKPT_TRY(auto total, parse_count(total_text, "total"));
  if (total > max_archive_bytes_)
    return make_error("the archive's " + std::to_string(total) + " bytes exceed checkpoints.max_archive_bytes (" +
                      std::to_string(max_archive_bytes_) + ") of the receiving agent", EFBIG);
  if (offset > total) return make_error("'offset' " + std::to_string(offset) + " is past 'total'");

  GPUCKPT_TRY(std::shared_ptr<Partial> partial, claim_for_piece(name));
  auto release = [&] {
    std::lock_guard lock(mutex_);
    partial->busy = false;
  };

  Fd fd(::open(partial_path(name).c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  struct stat st{};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = std::strerror(errno);
    release();
    return make_error("cannot open " + partial_path(name).string() + ": " + why, EIO);
  }
  const auto held = static_cast<std::uint64_t>(st.st_size);
  if (offset != held) {
    release();
    return make_error("this node holds " + std::to_string(held) + " bytes of " + name + ", not " +
                      std::to_string(offset) + ": resume from there (GET /v1/incoming/" + name + ")", EBUSY);
  }
  if (auto covered = partial->cover(fd.get(), held); !covered) {
    release();
    return make_error("cannot read the partial " + name + ": " + covered.error().message, EIO);
  }

  std::uint64_t position = held;
  std::string refused;
  int refused_errno = 0;
  const bool complete = read_body([&](const char* data, std::size_t length) {
    if (position - held + length > kMaxChunkBytes) {
      refused = "a chunk is at most " + std::to_string(kMaxChunkBytes) + " bytes";
      refused_errno = EFBIG;
      return false;
    }
    if (position + length > total) {
      refused = "more bytes than the declared total " + std::to_string(total);
      refused_errno = EFBIG;
      return false;
    }
    std::size_t written = 0;
    while (written < length) {
      const ssize_t n = ::pwrite(fd.get(), data + written, length - written, static_cast<off_t>(position + written));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        refused = std::string("writing failed: ") + std::strerror(errno);
        refused_errno = errno == ENOSPC ? ENOSPC : EIO;
        return false;
      }
      written += static_cast<std::size_t>(n);
    }
    SHA256_Update(&partial->hash, data, length);
    position += length;
    partial->hashed = position;
    return true;
  });
  if (refused_errno != 0) {
    // Whatever part of the refused piece reached the file is cut off again: the file and the hash agree.
    if (::ftruncate(fd.get(), static_cast<off_t>(position)) != 0)
      log::warn("transfer: cannot truncate " + partial_path(name).string() + ": " + std::strerror(errno));
  }
  release();
  if (refused_errno != 0) return make_error("refused the rest of " + name + ": " + refused, refused_errno);
  if (!complete)
    return make_error("the connection broke after " + std::to_string(position - held) + " bytes of " + name +
                      " (kept: resume from " + std::to_string(position) + ")", EIO);
  return nlohmann::json{{"name", name}, {"received_bytes", position}, {"present", false}};
}

// Nothing partial: the archive may already be here (a repeated migration). Same bytes: done; else refused.
Result<nlohmann::json> IncomingArchives::commit_present(const std::string& name, std::uint64_t size,
                                                        const std::string& want) const {
  const fs::path final_path = dir_ / name;
  struct stat st{};
  Fd fd(::open(final_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return make_error("nothing of " + name + " was received", ENOENT);
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  if (static_cast<std::uint64_t>(st.st_size) == size)
    if (auto hashed = hash_prefix(fd.get(), size, ctx); !hashed) return make_error(hashed.error().message, EIO);
  if (static_cast<std::uint64_t>(st.st_size) != size || hex_digest(ctx) != want)
    return make_error("this node already has a different archive named " + name + ": not replaced; remove or "
                      "rename it first", EBUSY);
  return nlohmann::json{{"archive", final_path.string()}, {"size", size}, {"sha256", want}, {"already_present", true}};
}

// Longer than most, kept whole: every refusal below either releases the partial file (kept for a commit again) or
// discards it (deleted, nothing of it referenced); each exit's choice stays beside the check that makes it.
Result<nlohmann::json> IncomingArchives::commit(const std::string& name, const nlohmann::json& body) {
  if (!is_transfer_name(name)) return state(name).error();
  GPUCKPT_TRY(const CommitRequest request, parse_commit_request(body));
  const bool store_backed = request.store_backed;
  const std::uint64_t size = request.size;
  const std::string& want = request.sha256;
  const fs::path final_path = dir_ / name;

  std::unique_lock lock(mutex_);
  auto& slot = partials_[name];
  if (slot && slot->busy) return make_error("another transfer of " + name + " is in progress", EBUSY);
  struct stat st{};
  if (::lstat(partial_path(name).c_str(), &st) != 0) {
    partials_.erase(name);
    return commit_present(name, size, want);
  }
  if (!slot) slot = std::make_shared<Partial>();
  auto partial = slot;
  partial->busy = true;
  lock.unlock();
  auto discard = [&](const std::string& why) {
    std::error_code ec;
    fs::remove(partial_path(name), ec);
    std::lock_guard relock(mutex_);
    partials_.erase(name);
    log::warn("transfer: discarded " + name + ": " + why);
    return make_error("the received " + name + " was discarded, nothing of it is kept: " + why, EBADMSG);
  };
  auto release = [&] {
    std::lock_guard relock(mutex_);
    partial->busy = false;
  };

  Fd fd(::open(partial_path(name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    release();
    return make_error("cannot open the partial " + name + ": " + std::strerror(errno), EIO);
  }
  const auto held = static_cast<std::uint64_t>(st.st_size);
  if (held < size) {
    release();
    return make_error("this node holds " + std::to_string(held) + " of the " + std::to_string(size) + " bytes of " +
                      name + ": send the rest first", EBUSY);
  }
  if (held > size) return discard("it holds " + std::to_string(held) + " bytes, more than the " + std::to_string(size) + " committed");
  if (auto covered = partial->cover(fd.get(), held); !covered) {
    release();
    return make_error("cannot read the partial " + name + ": " + covered.error().message, EIO);
  }
  const std::string got = hex_digest(partial->hash);
  if (got != want) return discard("its SHA-256 is " + got + ", the sender's is " + want);
  // Complete and verified: durable under the partial name, admitted, then renamed into place (never over another
  // file).
  if (::fsync(fd.get()) != 0) {
    const std::string why = std::strerror(errno);
    release();
    return make_error("cannot sync the received " + name + ": " + why, EIO);
  }
  nlohmann::json admitted(nullptr);
  if (store_backed) {
    if (!admit_) return discard("it is a store-backed checkpoint and this agent takes none");
    auto done = admit_(partial_path(name));
    if (!done && done.error().errno_value == ETIMEDOUT) {
      release();
      return make_error("the received " + name + " is verified but admitting it took too long: " +
                        done.error().message + "; commit again to go on (what it did so far is kept)", EBUSY);
    }
    // A checkpoint this node keeps under the same id and process (EEXIST) is refused as well (422, not 409: a
    // sender commits again on 409, "not yet").
    if (!done) return discard(done.error().message);
    admitted = std::move(*done);
  }
  if (::renameat2(AT_FDCWD, partial_path(name).c_str(), AT_FDCWD, final_path.c_str(), RENAME_NOREPLACE) != 0) {
    const std::string why = std::strerror(errno);
    release();
    return make_error("cannot put " + name + " in place: " + why, errno == EEXIST ? EBUSY : EIO);
  }
  if (auto synced = sync_directory(dir_); !synced) log::warn("transfer: " + synced.error().message);
  {
    std::lock_guard relock(mutex_);
    partials_.erase(name);
  }
  log::info("transfer: received " + name + " (" + std::to_string(size) + " bytes, sha256 " + want + ")" +
            (admitted.is_null() ? std::string() : ", chunks " + admitted.dump()));
  nlohmann::json answer{{"archive", final_path.string()}, {"size", size}, {"sha256", want}, {"already_present", false}};
  if (!admitted.is_null()) answer["chunks"] = std::move(admitted);
  return answer;
}

// ---- the sending end ----------------------------------------------------------------------------------------------

namespace {

struct Ipv4 {
  std::uint32_t address = 0;   // host order
};

Result<Ipv4> parse_ipv4(const std::string& text) {
  in_addr parsed{};
  if (::inet_pton(AF_INET, text.c_str(), &parsed) != 1) return make_error("'" + log::escaped(text, 64) + "' is not an IPv4 address");
  return Ipv4{ntohl(parsed.s_addr)};
}

struct Network {
  std::uint32_t base = 0;
  std::uint32_t mask = 0;
};

Result<Network> parse_network(const std::string& cidr) {
  const auto slash = cidr.find('/');
  const std::string bits_text = slash == std::string::npos ? "" : cidr.substr(slash + 1);
  if (slash == std::string::npos || bits_text.empty() || bits_text.size() > 2 ||
      bits_text.find_first_not_of("0123456789") != std::string::npos || std::stoi(bits_text) > 32)
    return make_error("transfer.peer_networks: '" + log::escaped(cidr, 64) + "' is not A.B.C.D/N");
  auto base = parse_ipv4(cidr.substr(0, slash));
  if (!base) return make_error("transfer.peer_networks: '" + log::escaped(cidr, 64) + "' is not A.B.C.D/N");
  const int bits = std::stoi(bits_text);
  const std::uint32_t mask = bits == 0 ? 0 : ~std::uint32_t{0} << (32 - bits);
  return Network{base->address & mask, mask};
}

}  // namespace

Result<void> check_network(const std::string& cidr) {
  GPUCKPT_TRY_VOID(parse_network(cidr));
  return {};
}

Result<void> check_peer_url(const std::string& url, const std::vector<std::string>& networks) {
  const std::string scheme = "http://";
  const std::string usage = "'to' must be http://A.B.C.D:PORT, the target agent's address, got '" + log::escaped(url, 80) + "'";
  if (url.rfind(scheme, 0) != 0) return make_error(usage);
  const std::string rest = url.substr(scheme.size());
  const auto colon = rest.find(':');
  if (colon == std::string::npos) return make_error(usage);
  const std::string port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) < 1 || std::stoi(port) > 65535)
    return make_error(usage);
  auto address = parse_ipv4(rest.substr(0, colon));
  if (!address) return make_error(usage);
  for (const auto& cidr : networks) {
    auto network = parse_network(cidr);
    if (network && (address->address & network->mask) == network->base) return {};
  }
  return make_error(rest.substr(0, colon) + " is outside transfer.peer_networks of this agent: archives are pushed "
                    "only to agents in those networks (the chart's transfer.peerNetworks)", EACCES);
}

Result<PeerAnswer> ask_peer(httplib::Client& client, const char* method, const std::string& path, std::string body,
                            const char* content_type, const std::string& who, JobDeadline deadline,
                            const RequestStop* stop) {
  httplib::Request request;
  request.method = method;
  request.path = path;
  if (content_type != nullptr) request.headers.emplace("Content-Type", content_type);
  request.body = std::move(body);
  GPUCKPT_TRY(auto answer, bounded_send(client, std::move(request), who, deadline, "limits.job_timeout_seconds",
                                        kMaxPeerAnswerBytes, nullptr, stop));
  return PeerAnswer{answer.status, std::move(answer.body)};
}

nlohmann::json peer_object(std::string_view body) {
  JsonLimits limits;
  limits.max_bytes = kMaxPeerAnswerBytes;
  limits.max_depth = 8;
  auto parsed = parse_json(body, "the target's answer", limits);
  return parsed && parsed->is_object() ? std::move(*parsed) : nlohmann::json(nullptr);
}

std::string peer_says(int status, std::string_view text) {
  std::string why = "answered " + std::to_string(status);
  const auto body = peer_object(text);
  if (const auto error = body.is_object() ? body.find("error") : body.end(); error != body.end() && error->is_object())
    if (const auto message = error->find("message"); message != error->end() && message->is_string())
      why += ": " + log::escaped(message->get_ref<const std::string&>(), kMaxPeerMessageChars);
  return why;
}

Result<IncomingState> parse_incoming_state(std::string_view text, const std::string& who) {
  const auto body = peer_object(text);
  const auto received = body.is_object() ? body.find("received_bytes") : body.end();
  const auto present = body.is_object() ? body.find("present") : body.end();
  if (received == body.end() || !received->is_number_unsigned() || (present != body.end() && !present->is_boolean()))
    return make_error(who + " answered with no unsigned \"received_bytes\" (and a boolean \"present\"): it is no "
                      "gpuckpt agent, or another version's", EIO);
  return IncomingState{received->get<std::uint64_t>(), present != body.end() && present->get<bool>()};
}

Result<CommitAnswer> parse_commit_answer(std::string_view text, const std::string& who) {
  const auto body = peer_object(text);
  const auto archive = body.is_object() ? body.find("archive") : body.end();
  const auto present = body.is_object() ? body.find("already_present") : body.end();
  const auto chunks = body.is_object() ? body.find("chunks") : body.end();
  if (archive == body.end() || !archive->is_string() || (present != body.end() && !present->is_boolean()) ||
      (chunks != body.end() && !chunks->is_object() && !chunks->is_null()))
    return make_error(who + " committed without naming its path (a string \"archive\"; a boolean "
                      "\"already_present\", an object \"chunks\")", EIO);
  return CommitAnswer{archive->get<std::string>(), present != body.end() && present->get<bool>(),
                      chunks == body.end() ? nlohmann::json(nullptr) : *chunks};
}

namespace {

using AskPeer = std::function<Result<PeerAnswer>(const char* method, const std::string& path, std::string body,
                                                 const char* content_type)>;

// `what` and what the target answered (or why there was no answer).
std::string answer_error(const Result<PeerAnswer>& result, const std::string& what) {
  if (!result) return what + ": " + result.error().message;
  return what + " " + peer_says(result->status, result->body);
}

Result<std::string> sha256_of(int fd, std::uint64_t size, JobDeadline deadline) {
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  GPUCKPT_TRY_VOID(hash_prefix(fd, size, ctx, deadline));
  return hex_digest(ctx);
}

void to_target(httplib::Client& client, const std::string& token) {
  client.set_bearer_token_auth(token.c_str());
  client.set_connection_timeout(5);
  client.set_read_timeout(30);
  client.set_write_timeout(30);
}

// `length` bytes of the archive at `offset`.
Result<void> read_piece(int fd, char* buffer, std::size_t length, std::uint64_t offset, const fs::path& archive) {
  std::size_t got = 0;
  while (got < length) {
    const ssize_t n = ::pread(fd, buffer + got, length - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error("reading " + archive.string() + " failed (did it change while it was sent?)", EIO);
    got += static_cast<std::size_t>(n);
  }
  return {};
}

// The commit of the archive pushed as `name` (`base`: its /v1/incoming path): its size and SHA-256, store-backed or
// not.
Result<CommitAnswer> commit_push(const AskPeer& ask, const std::string& base, const std::string& name,
                                 const PushOptions& options, std::uint64_t size, const std::string& digest) {
  const std::string who = "the target agent at " + options.url;
  nlohmann::json commit_request{{"size", size}, {"sha256", digest}};
  if (options.store_backed) commit_request["store_backed"] = true;
  const std::string commit_body = commit_request.dump();
  auto committed = ask("POST", base + "/commit", commit_body, "application/json");
  // A commit that admits a store-backed checkpoint checks and references its chunks (an archive that carries them:
  // imports them) within one request's deadline; a target that ran out of time keeps what it did and answers 409:
  // committing again goes on from there.
  for (int again = 1; committed && committed->status == 409 && again < kMaxCommits &&
                      std::chrono::steady_clock::now() < options.deadline;
       ++again) {
    log::warn("transfer of " + name + " to " + options.url + ": " + answer_error(committed, "commit") + "; again");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    committed = ask("POST", base + "/commit", commit_body, "application/json");
  }
  if (!committed || committed->status != 200)
    return make_error(answer_error(committed, who + " (commit of " + name + ")"),
                      committed && committed->status == 422 ? EBADMSG
                      : !committed                         ? committed.error().errno_value
                                                           : EIO);
  return parse_commit_answer(committed->body, who + " (commit of " + name + ")");
}

}  // namespace

Result<nlohmann::json> push_archive(const fs::path& archive, const PushOptions& options,
                                    const std::function<void(std::uint64_t)>& progress) {
  const std::string name = options.name.empty() ? archive.filename().string() : options.name;
  if (!is_transfer_name(name))
    return make_error("the archive's name " + log::escaped(name, 64) + " is not one an agent receives (.tar, .tar.gz, .tar.zst)");
  Fd fd(::open(archive.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st{};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return make_error("cannot open " + archive.string() + ": " + std::strerror(errno), ENOENT);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  GPUCKPT_TRY(const std::string digest, sha256_of(fd.get(), size, options.deadline), "hashing " + archive.string());

  httplib::Client client(options.url);
  to_target(client, options.token);
  const std::string base = "/v1/incoming/" + name;
  const std::string who = "the target agent at " + options.url;
  const auto ask = [&](const char* method, const std::string& path, std::string body, const char* type) {
    return ask_peer(client, method, path, std::move(body), type, who, options.deadline, options.stop);
  };
  bool present = false;   // the target has a file of that name already: only the commit compares it
  auto held = [&]() -> Result<std::uint64_t> {
    auto result = ask("GET", base, {}, nullptr);
    if (!result || result->status != 200)
      return make_error(answer_error(result, who + " (GET " + base + ")"),
                        !result && result.error().errno_value == ETIMEDOUT ? ETIMEDOUT : EIO);
    GPUCKPT_TRY(auto state, parse_incoming_state(result->body, who + " (GET " + base + ")"));
    present = state.present;
    return state.received_bytes;
  };

  GPUCKPT_TRY(auto start, held());
  std::uint64_t offset = present ? size : start;
  if (offset > size)
    return make_error("the target holds " + std::to_string(offset) + " bytes of a partial " + name + ", more than its " +
                      std::to_string(size) + ": another archive of that name is arriving there", EBUSY);
  nlohmann::json resumed = offset > 0 ? nlohmann::json::array({offset}) : nlohmann::json::array();
  std::uint64_t sent = 0;
  int failures = 0;
  std::vector<char> buffer(std::min(options.chunk_bytes, kMaxChunkBytes));
  std::string last_error;
  while (offset < size) {
    if (std::chrono::steady_clock::now() >= options.deadline)
      return make_error("ran out of time at " + std::to_string(offset) + " of " + std::to_string(size) + " bytes", ETIMEDOUT);
    const auto length = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - offset));
    GPUCKPT_TRY_VOID(read_piece(fd.get(), buffer.data(), length, offset, archive));
    const std::string path = base + "?offset=" + std::to_string(offset) + "&total=" + std::to_string(size);
    auto result = ask("PUT", path, std::string(buffer.data(), length), "application/octet-stream");
    if (!result && result.error().errno_value == ETIMEDOUT) return result.error();
    if (result && result->status == 200) {
      offset += length;
      sent += length;
      failures = 0;
      progress(offset);
      continue;
    }
    // Refusals that a retry cannot change end the push; a broken connection or a conflict is resumed.
    if (result && result->status != 409 && result->status != 429 && result->status < 500)
      return make_error(answer_error(result, who + " refused PUT " + base), EIO);
    last_error = answer_error(result, "PUT " + base);
    if (++failures >= options.max_attempts)
      return make_error("gave up after " + std::to_string(failures) + " failed attempts in a row at " +
                        std::to_string(offset) + " of " + std::to_string(size) + " bytes: " + last_error, EIO);
    log::warn("transfer of " + name + " to " + options.url + ": " + last_error + "; resuming");
    std::this_thread::sleep_for(std::chrono::milliseconds(200) * failures);
    client.stop();
    auto now_held = held();
    if (!now_held) continue;
    if (*now_held > size) return make_error("the target's partial " + name + " grew past the archive's size", EBUSY);
    offset = *now_held;
    resumed.push_back(offset);
  }
  GPUCKPT_TRY(auto answer, commit_push(ask, base, name, options, size, digest));
  return nlohmann::json{{"archive", answer.archive},
                        {"size", size},
                        {"sha256", digest},
                        {"sent_bytes", sent},
                        {"resumed", resumed},
                        {"already_present", answer.already_present},
                        {"chunks", answer.chunks}};
}

}  // namespace gpuckpt::node
