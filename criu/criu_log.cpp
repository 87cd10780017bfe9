#include "criu/criu_log.h"

#include <fstream>
#include <vector>

namespace gpuckpt {

namespace fs = std::filesystem;

std::string criu_log_reasons(const fs::path& log) {
  constexpr std::size_t kMaxRead = 8u << 20, kMaxLine = 600, kMaxReasons = 4;
  std::ifstream in(log);
  std::vector<std::string> refusals, errors;
  std::string line;
  for (std::size_t read = 0; read < kMaxRead && std::getline(in, line); read += line.size() + 1) {
    if (line.find("gpuckpt: ") != std::string::npos && line.find("refusing") != std::string::npos)
      refusals.push_back(line.substr(0, kMaxLine));
    else if (line.find("Error") != std::string::npos && line.find("RLIMIT_NOFILE") == std::string::npos)
      errors.push_back(line.substr(0, kMaxLine));
  }
  std::vector<std::string> reasons = refusals;
  const std::size_t room = reasons.size() < kMaxReasons ? kMaxReasons - reasons.size() : 0;
  for (std::size_t i = errors.size() > room ? errors.size() - room : 0; i < errors.size(); ++i) reasons.push_back(errors[i]);
  if (reasons.size() > kMaxReasons) reasons.resize(kMaxReasons);
  std::string out;
  for (const auto& r : reasons) out += (out.empty() ? "" : " | ") + r;
  return out;
}

}  // namespace gpuckpt
