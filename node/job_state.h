// What a job is and how it stands, and what kind of error refused a request, as enums: the strings they have in
// job records (<state_dir>/jobs/*.json), in the API's JSON and in metric labels are these functions' alone
// (docs/api.md lists them; job_state_test checks both).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace gpuckpt::node {

// "checkpoint", "restore", "image", "transfer", "pull" (a chunk pull). Job ids start with its prefix.
enum class JobKind { checkpoint, restore, image, transfer, pull };
inline constexpr std::array kJobKinds = {JobKind::checkpoint, JobKind::restore, JobKind::image, JobKind::transfer,
                                         JobKind::pull};
std::string_view to_string(JobKind kind);
std::optional<JobKind> job_kind_from_string(std::string_view text);
// "ck", "rs", "im", "tr", "pl".
std::string_view job_id_prefix(JobKind kind);

// queued -> running -> succeeded | failed | interrupted (the agent stopped and cut it short, or it never started:
// JobService::shutdown). A job of an earlier agent run found queued or running is closed (job_store.h).
enum class JobState { queued, running, succeeded, failed, interrupted };
inline constexpr std::array kJobStates = {JobState::queued, JobState::running, JobState::succeeded, JobState::failed,
                                          JobState::interrupted};
std::string_view to_string(JobState state);
std::optional<JobState> job_state_from_string(std::string_view text);
bool is_finished(JobState state);
// "queued, running, succeeded, failed or interrupted": for messages that say what a request may name.
std::string job_state_choices();

// Why a request was refused, as the API answers it (docs/api.md "Errors"). Errors travel as Error values whose
// errno_value says the kind: EINVAL bad_request · EACCES, EPERM forbidden · ENOENT not_found · EBUSY, EEXIST
// conflict · EFBIG too_large · EBADMSG (unusable archive), EDOM (no GPU match) unprocessable · EAGAIN busy ·
// EDQUOT insufficient_storage · ESHUTDOWN stopping · any other internal.
enum class ErrorKind {
  bad_request, forbidden, not_found, conflict, too_large, unprocessable, busy, internal, stopping, insufficient_storage
};
inline constexpr std::array kErrorKinds = {
    ErrorKind::bad_request, ErrorKind::forbidden, ErrorKind::not_found,  ErrorKind::conflict,
    ErrorKind::too_large,   ErrorKind::unprocessable, ErrorKind::busy,   ErrorKind::internal,
    ErrorKind::stopping,    ErrorKind::insufficient_storage};
ErrorKind error_kind(const Error& error);
int http_status(ErrorKind kind);
inline int http_status(const Error& error) { return http_status(error_kind(error)); }

// The `reason` label of gpuckpt_api_rejected_total: "auth" (no or a wrong token), "validation", "not_found",
// "conflict".
enum class RejectReason { auth, validation, not_found, conflict };
inline constexpr std::array kRejectReasons = {RejectReason::auth, RejectReason::validation, RejectReason::not_found,
                                              RejectReason::conflict};
std::string_view to_string(RejectReason reason);
// A refused request's reason: not_found, conflict, else validation (a busy agent's 429 too).
RejectReason reject_reason(ErrorKind kind);

}  // namespace gpuckpt::node
