// node/job_state.h: the strings of job kinds, job states, refusal reasons and error kinds are the ones job
// records on disk, the API and the metrics use, and the ones docs/api.md names.
#include <catch2/catch_test_macros.hpp>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "node/job_state.h"
#include "node/job_store.h"
#include "node/metrics.h"
#include "test/support/temp_dir.h"

using namespace gpuckpt;
using nlohmann::json;

namespace {

std::string api_doc() {
  std::ifstream file(std::string(GPUCKPT_SOURCE_DIR) + "/docs/api.md");
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

// "`a`, `b` or `c`" / "a|b|c" of `values`' strings.
template <class Values>
std::string listed(const Values& values, const std::string& quote, const std::string& comma, const std::string& last) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += i + 1 == values.size() ? last : comma;
    out += quote + std::string(node::to_string(values[i])) + quote;
  }
  return out;
}

}  // namespace

TEST_CASE("job kinds and states round-trip through their strings; unknown strings are none", "[unit]") {
  for (node::JobKind kind : node::kJobKinds) {
    INFO(node::to_string(kind));
    CHECK(node::job_kind_from_string(node::to_string(kind)) == kind);
    CHECK(node::job_id_prefix(kind).size() == 2);
  }
  for (node::JobState state : node::kJobStates) {
    INFO(node::to_string(state));
    CHECK(node::job_state_from_string(node::to_string(state)) == state);
  }
  CHECK(node::to_string(node::JobKind::pull) == "pull");
  CHECK(node::job_id_prefix(node::JobKind::checkpoint) == "ck");
  CHECK_FALSE(node::job_kind_from_string("Checkpoint").has_value());
  CHECK_FALSE(node::job_state_from_string("done").has_value());
  CHECK_FALSE(node::job_state_from_string("").has_value());
  CHECK(node::is_finished(node::JobState::interrupted));
  CHECK_FALSE(node::is_finished(node::JobState::running));
  CHECK(node::job_state_choices() == "queued, running, succeeded, failed or interrupted");
}

TEST_CASE("a job record on disk holds the kind's and state's strings and reads back as them", "[unit]") {
  test::TempDir tmp;
  int n = 0;
  for (node::JobKind kind : node::kJobKinds)
    for (node::JobState state : node::kJobStates) {
      node::JobStatus job;
      char suffix[16];
      std::snprintf(suffix, sizeof suffix, "%08x", n++);
      job.id = std::string(node::job_id_prefix(kind)) + "-20261204T120000Z-" + suffix;
      job.kind = kind;
      job.state = state;
      job.phase = "done";
      REQUIRE(node::save_job(tmp.path, job).ok());
      std::ifstream file(node::job_record_path(tmp.path, job.id));
      const json record = json::parse(file);
      CHECK(record["kind"] == std::string(node::to_string(kind)));
      CHECK(record["state"] == std::string(node::to_string(state)));
    }
  const auto loaded = node::load_jobs(tmp.path);
  CHECK(loaded.size() == node::kJobKinds.size() * node::kJobStates.size());
  for (const auto& job : loaded) {
    INFO(job.id);
    CHECK(job.id.substr(0, 2) == node::job_id_prefix(job.kind));
  }
  // A record whose state no agent writes is skipped, not taken for some state.
  std::ofstream(node::job_record_path(tmp.path, "ck-20261204T120000Z-badbad00"))
      << R"({"id": "ck-20261204T120000Z-badbad00", "kind": "checkpoint", "state": "paused"})";
  std::ofstream(node::job_record_path(tmp.path, "xx-20261204T120000Z-badbad01"))
      << R"({"id": "xx-20261204T120000Z-badbad01", "kind": "export", "state": "failed"})";
  CHECK(node::load_jobs(tmp.path).size() == loaded.size());
}

TEST_CASE("docs/api.md names the job states, the refusal reasons and every error kind's status", "[unit]") {
  const std::string doc = api_doc();
  REQUIRE_FALSE(doc.empty());
  const std::string states = "`state` is " + listed(node::kJobStates, "`", ", ", " or ");
  INFO(states);
  CHECK(doc.find(states) != std::string::npos);
  CHECK(doc.find("`state=" + listed(node::kJobStates, "", "|", "|") + "`") != std::string::npos);
  const std::string reasons =
      "`gpuckpt_api_rejected_total{reason=" + listed(node::kRejectReasons, "\"", "\\|", "\\|") + "}`";
  INFO(reasons);
  CHECK(doc.find(reasons) != std::string::npos);
  for (node::ErrorKind kind : node::kErrorKinds) {
    const std::string row = "| " + std::to_string(node::http_status(kind)) + " |";
    INFO(row);
    CHECK(doc.find(row) != std::string::npos);
  }
}

TEST_CASE("errno values map to the error kinds docs/api.md gives them", "[unit]") {
  struct Case {
    int errno_value;
    node::ErrorKind kind;
    int status;
    node::RejectReason reason;
  };
  for (const auto& c : {Case{EINVAL, node::ErrorKind::bad_request, 400, node::RejectReason::validation},
                        Case{EACCES, node::ErrorKind::forbidden, 403, node::RejectReason::validation},
                        Case{EPERM, node::ErrorKind::forbidden, 403, node::RejectReason::validation},
                        Case{ENOENT, node::ErrorKind::not_found, 404, node::RejectReason::not_found},
                        Case{EBUSY, node::ErrorKind::conflict, 409, node::RejectReason::conflict},
                        Case{EEXIST, node::ErrorKind::conflict, 409, node::RejectReason::conflict},
                        Case{EFBIG, node::ErrorKind::too_large, 413, node::RejectReason::validation},
                        Case{EBADMSG, node::ErrorKind::unprocessable, 422, node::RejectReason::validation},
                        Case{EDOM, node::ErrorKind::unprocessable, 422, node::RejectReason::validation},
                        Case{EAGAIN, node::ErrorKind::busy, 429, node::RejectReason::validation},
                        Case{EIO, node::ErrorKind::internal, 500, node::RejectReason::validation},
                        Case{ESHUTDOWN, node::ErrorKind::stopping, 503, node::RejectReason::validation},
                        Case{EDQUOT, node::ErrorKind::insufficient_storage, 507, node::RejectReason::validation}}) {
    INFO(c.errno_value);
    const Error error = make_error("x", c.errno_value);
    CHECK(node::error_kind(error) == c.kind);
    CHECK(node::http_status(error) == c.status);
    CHECK(node::reject_reason(c.kind) == c.reason);
  }
}

TEST_CASE("the metrics label job kinds and refusal reasons with their strings", "[unit]") {
  node::Metrics metrics;
  metrics.job_accepted(node::JobKind::restore);
  metrics.request_rejected(node::RejectReason::not_found);
  metrics.request_rejected(node::RejectReason::not_found);
  const std::string text = metrics.render();
  CHECK(text.find("gpuckpt_jobs_in_flight{kind=\"restore\"} 1\n") != std::string::npos);
  CHECK(text.find("gpuckpt_jobs_in_flight{kind=\"checkpoint\"} 0\n") != std::string::npos);
  CHECK(text.find("gpuckpt_api_rejected_total{reason=\"not_found\"} 2\n") != std::string::npos);
  for (node::RejectReason reason : node::kRejectReasons)
    CHECK(text.find("gpuckpt_api_rejected_total{reason=\"" + std::string(node::to_string(reason)) + "\"}") !=
          std::string::npos);
}
