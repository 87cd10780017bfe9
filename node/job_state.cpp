#include "node/job_state.h"

#include <cerrno>

namespace gpuckpt::node {

namespace {

template <typename Enum, std::size_t N>
std::optional<Enum> from_string(const std::array<Enum, N>& all, std::string_view text) {
  for (Enum value : all)
    if (to_string(value) == text) return value;
  return std::nullopt;
}

}  // namespace

std::string_view to_string(JobKind kind) {
  switch (kind) {
    case JobKind::checkpoint: return "checkpoint";
    case JobKind::restore: return "restore";
    case JobKind::image: return "image";
    case JobKind::transfer: return "transfer";
    case JobKind::pull: return "pull";
  }
  return "?";
}

std::optional<JobKind> job_kind_from_string(std::string_view text) { return from_string(kJobKinds, text); }

std::string_view job_id_prefix(JobKind kind) {
  switch (kind) {
    case JobKind::checkpoint: return "ck";
    case JobKind::restore: return "rs";
    case JobKind::image: return "im";
    case JobKind::transfer: return "tr";
    case JobKind::pull: return "pl";
  }
  return "?";
}

std::string_view to_string(JobState state) {
  switch (state) {
    case JobState::queued: return "queued";
    case JobState::running: return "running";
    case JobState::succeeded: return "succeeded";
    case JobState::failed: return "failed";
    case JobState::interrupted: return "interrupted";
  }
  return "?";
}

std::optional<JobState> job_state_from_string(std::string_view text) { return from_string(kJobStates, text); }

bool is_finished(JobState state) {
  return state == JobState::succeeded || state == JobState::failed || state == JobState::interrupted;
}

std::string job_state_choices() {
  std::string out;
  for (std::size_t i = 0; i < kJobStates.size(); ++i) {
    if (i > 0) out += i + 1 == kJobStates.size() ? " or " : ", ";
    out += to_string(kJobStates[i]);
  }
  return out;
}

ErrorKind error_kind(const Error& error) {
  switch (error.errno_value) {
    case EINVAL: return ErrorKind::bad_request;
    case EACCES: case EPERM: return ErrorKind::forbidden;
    case ENOENT: return ErrorKind::not_found;
    case EBUSY: case EEXIST: return ErrorKind::conflict;
    case EFBIG: return ErrorKind::too_large;
    case EAGAIN: return ErrorKind::busy;
    case EBADMSG: case EDOM: return ErrorKind::unprocessable;
    case EDQUOT: return ErrorKind::insufficient_storage;
    case ESHUTDOWN: return ErrorKind::stopping;
    default: return ErrorKind::internal;
  }
}

int http_status(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::bad_request: return 400;
    case ErrorKind::forbidden: return 403;
    case ErrorKind::not_found: return 404;
    case ErrorKind::conflict: return 409;
    case ErrorKind::too_large: return 413;
    case ErrorKind::unprocessable: return 422;
    case ErrorKind::busy: return 429;
    case ErrorKind::internal: return 500;
    case ErrorKind::stopping: return 503;
    case ErrorKind::insufficient_storage: return 507;
  }
  return 500;
}

std::string_view to_string(RejectReason reason) {
  switch (reason) {
    case RejectReason::auth: return "auth";
    case RejectReason::validation: return "validation";
    case RejectReason::not_found: return "not_found";
    case RejectReason::conflict: return "conflict";
  }
  return "?";
}

RejectReason reject_reason(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::not_found: return RejectReason::not_found;
    case ErrorKind::conflict: return RejectReason::conflict;
    default: return RejectReason::validation;
  }
}

}  // namespace gpuckpt::node
