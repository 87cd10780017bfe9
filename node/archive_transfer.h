// Moving a checkpoint archive from one node's agent to another's, without the API server in the data path
// (docs/api.md "Archive transfers", docs/security.md).
//
// The source agent pushes; the target agent receives. Why push and not pull: the source holds the archive and its
// digest, and pushing needs no endpoint that hands out archive bytes. A pull would need `GET` of an archive from
// the source, which would let every token holder read any checkpoint of the node (process memory, secrets) with one
// request; a push only ever sends an archive to another agent, and the receiving side is one more authenticated
// /v1 endpoint under the limits every request has. Each chunk is one bounded request (the server's connection
// deadline stays as it is for every client), so a multi-GiB archive needs no long-lived connection.
//
// The protocol (every call with the agents' shared bearer token):
//   GET  /v1/incoming/NAME                     {"name", "received_bytes", "present"}
//   PUT  /v1/incoming/NAME?offset=O&total=T    body: the archive's bytes from O on; written as they arrive, so a
//                                              dropped connection leaves what came and the next PUT resumes there
//   POST /v1/incoming/NAME/commit              {"size": T, "sha256": HEX[, "store_backed": true]}: the whole
//                                              received file's SHA-256 must be HEX, else it is deleted (nothing
//                                              usable is left behind); then it is admitted (a store-backed
//                                              checkpoint's chunks checked in the store and referenced:
//                                              node/chunk_transfer.h) and renamed into place, never over an
//                                              existing file
//
// The receiver treats the sender as hostile (any token holder can push): NAME is a plain archive file name that the
// receiver places itself (`<checkpoints.dir>/.NAME.incoming` while it arrives, `<checkpoints.dir>/NAME` once
// verified; no paths, no dot files, no replacing), T is at most checkpoints.max_archive_bytes and no byte beyond T is
// written, a chunk is at most kMaxChunkBytes, at most kMaxIncoming transfers are partial at once (one idle for an
// hour is removed when room is needed), and one NAME takes one PUT at a time. A verified file is still an untrusted
// archive: every restore or image job validates it whole before use (AgentService::checked_archive).
// The sender only pushes to an address inside transfer.peer_networks (private ranges by default): a token holder
// can make an agent send a checkpoint to another agent, not to a host of their choice on the internet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/container_runtime.h"
#include "base/result.h"
#include "node/request_stop.h"

namespace httplib {
class Client;
}

namespace gpuckpt::node {

inline constexpr std::size_t kMaxChunkBytes = 16U << 20;     // one PUT's body
inline constexpr std::size_t kDefaultChunkBytes = 8U << 20;  // what a sender puts in one PUT
inline constexpr std::size_t kMaxIncoming = 8;                // partial transfers kept at once

// A name the receiver accepts: [A-Za-z0-9][A-Za-z0-9._-]*, at most 200 characters, ending in .tar, .tar.gz or
// .tar.zst (what checkpoint archives are called).
bool is_transfer_name(std::string_view name);

// The receiving end. Errors carry the errno kinds of node/job_state.h's error_kind (EINVAL 400, EBUSY 409,
// EFBIG 413, EBADMSG 422, EAGAIN 429).
class IncomingArchives {
 public:
  // Run on a received file that the sender's commit declares store-backed ("store_backed": true), once its digest is
  // verified, before it is put in place (node/chunk_transfer.h references its chunks here, importing carried ones);
  // it may replace the file. Its answer goes into the commit's as "chunks". An error discards the file, except ETIMEDOUT: the file
  // stays for a commit again. Why the sender declares it: finding out means reading the whole archive, too slow
  // for one request with a large inline archive; a sender that does not declare a store-backed archive gets one on
  // this node whose restore stops at its missing chunks, before CRIU touches anything (nothing else is at stake).
  using Admit = std::function<Result<nlohmann::json>(const std::filesystem::path& received)>;
  IncomingArchives(std::filesystem::path dir, std::uint64_t max_archive_bytes, Admit admit = {});

  Result<nlohmann::json> state(const std::string& name);
  // `read_body` feeds the request body to the callback it is given, chunk by chunk (cpp-httplib's ContentReader);
  // it returns false when the connection broke. Answers the state after the bytes that came were written.
  using BodyReader = std::function<bool(const std::function<bool(const char*, std::size_t)>&)>;
  Result<nlohmann::json> receive(const std::string& name, std::string_view offset, std::string_view total,
                                 const BodyReader& read_body);
  Result<nlohmann::json> commit(const std::string& name, const nlohmann::json& body);

 private:
  struct Partial;
  std::filesystem::path partial_path(const std::string& name) const;
  Result<void> make_room();   // with mutex_ held
  // The transfer of `name` marked busy for a PUT: refused while the archive is here already or another PUT or commit
  // works on it, and when a new one finds no room.
  Result<std::shared_ptr<Partial>> claim_for_piece(const std::string& name);
  Result<nlohmann::json> commit_present(const std::string& name, std::uint64_t size, const std::string& want) const;

  std::filesystem::path dir_;
  std::uint64_t max_archive_bytes_;
  Admit admit_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Partial>> partials_;
};

// "http://A.B.C.D:PORT" with A.B.C.D inside one of `networks` ("10.0.0.0/8"), else an error naming the setting.
Result<void> check_peer_url(const std::string& url, const std::vector<std::string>& networks);
// A network of transfer.peer_networks: "A.B.C.D/N".
Result<void> check_network(const std::string& cidr);

// --- the sender's side: a target agent's answers are untrusted (any host inside transfer.peer_networks can answer) --
// Every answer of the protocol is a small JSON object: more than this ends the request (EFBIG).
inline constexpr std::size_t kMaxPeerAnswerBytes = 64U << 10;
// The most of a target's error message that reaches a job's error, its record and the log, escaped.
inline constexpr std::size_t kMaxPeerMessageChars = 1024;

// One request to a target agent, its answer bounded by kMaxPeerAnswerBytes and ended at `deadline` (the job's):
// bounded_send's errors (ETIMEDOUT, EFBIG, EIO when no answer came). `who` names the target ("the target agent at
// URL"). `stop` (may be null): the agent's, which ends it early (bounded_send).
struct PeerAnswer {
  int status = 0;
  std::string body;
};
Result<PeerAnswer> ask_peer(httplib::Client& client, const char* method, const std::string& path, std::string body,
                            const char* content_type, const std::string& who, JobDeadline deadline,
                            const RequestStop* stop = nullptr);
// A target's answer body as a JSON object (parse_json's limits), or null when it is none.
nlohmann::json peer_object(std::string_view body);
// "answered STATUS" and, when the body is {"error": {"message": TEXT}} with TEXT a string, ": TEXT" escaped and cut
// at kMaxPeerMessageChars: what a refusal says in the job's error. One line, whatever the body.
std::string peer_says(int status, std::string_view body);

// The answers push_archive acts on, each read with its types checked (fed to fuzz/transfer_answer_fuzz); an error
// names `who` and what was wrong.
struct IncomingState {   // GET /v1/incoming/NAME
  std::uint64_t received_bytes = 0;
  bool present = false;
};
Result<IncomingState> parse_incoming_state(std::string_view body, const std::string& who);
struct CommitAnswer {    // POST /v1/incoming/NAME/commit
  std::string archive;   // the path on the target
  bool already_present = false;
  nlohmann::json chunks;   // what the target's admission did, as it said (an object, or null)
};
Result<CommitAnswer> parse_commit_answer(std::string_view body, const std::string& who);

struct PushOptions {
  std::string url;             // the target agent, checked by check_peer_url
  std::string name;            // the name on the target; empty: the archive's file name
  bool store_backed = false;   // the commit asks the target to admit it (IncomingArchives::Admit)
  std::string token;           // the agents' shared bearer token
  std::size_t chunk_bytes = kDefaultChunkBytes;
  int max_attempts = 6;        // consecutive failed PUTs without progress before the push gives up
  JobDeadline deadline = JobDeadline::max();
  const RequestStop* stop = nullptr;   // the agent's stop: ends the push early (may be null)
};

// Sends `archive` to the agent at options.url as its file name: hashes it, asks how much the target already holds,
// PUTs the rest chunk by chunk (resuming from the target's offset after a broken connection), then commits with the
// whole archive's SHA-256. `progress` gets the bytes the target holds after each chunk. The result:
// {"archive": the path on the target, "size", "sha256", "sent_bytes", "resumed": [offsets], "already_present"}.
Result<nlohmann::json> push_archive(const std::filesystem::path& archive, const PushOptions& options,
                                    const std::function<void(std::uint64_t)>& progress);

}  // namespace gpuckpt::node
