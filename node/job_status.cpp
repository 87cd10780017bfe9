#include "node/job_status.h"

namespace gpuckpt::node {

std::string capped_job_error(std::string message) {
  if (message.size() <= kMaxJobErrorBytes) return message;
  const std::size_t total = message.size();
  std::size_t cut = kMaxJobErrorBytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;   // not inside a character
  message.resize(cut);
  return message + "... (" + std::to_string(total - cut) + " more bytes cut)";
}

nlohmann::json to_json(const JobStatus& job) {
  nlohmann::json j = {{"id", job.id},           {"kind", to_string(job.kind)}, {"state", to_string(job.state)},
                      {"phase", job.phase},     {"created_at", job.created_at},
                      {"phase_seconds", job.phase_seconds}, {"request", job.request}, {"result", job.result}};
  if (!job.runtime_phase_seconds.empty()) j["runtime_phase_seconds"] = job.runtime_phase_seconds;
  if (!job.error.empty()) j["error"] = job.error;
  if (!job.finished_at.empty()) j["finished_at"] = job.finished_at;
  return j;
}

}  // namespace gpuckpt::node
