// A job as the node keeps it (its record, <state_dir>/jobs/<id>.json: job_store.h), lists it (GET /v1/<kind>s) and
// tells of it (job_events.h).
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "node/job_state.h"

namespace gpuckpt::node {

// A job's error as stored (its record), listed (GET /v1/jobs) and logged: longer ones are cut (at a UTF-8
// character's start) and say so. What a peer or a runtime answered is inside it, and it is no place for megabytes.
inline constexpr std::size_t kMaxJobErrorBytes = 4096;
std::string capped_job_error(std::string message);

struct JobStatus {
  std::string id;
  JobKind kind = JobKind::checkpoint;
  JobState state = JobState::queued;
  std::string phase;    // the step running now or last: "checkpointing", "annotating", "restoring", ...
  std::string error;
  std::string created_at;
  std::string finished_at;
  std::map<std::string, double> phase_seconds;
  // The runtime's call ("checkpointing") in parts that do not overlap, from CRIU's statistics where the archive
  // carries them (criu/criu_stats.h checkpoint_runtime_phases); empty where it does not.
  std::map<std::string, double> runtime_phase_seconds;
  nlohmann::json request;
  nlohmann::json result = nlohmann::json::object();
};
// Its record and the API's answer: kind and state by their strings (job_state.h).
nlohmann::json to_json(const JobStatus& job);

}  // namespace gpuckpt::node
