#include "criu/criu_log.h"

#include <catch2/catch_test_macros.hpp>

#include <fstream>
#include <string>

#include "test/support/temp_dir.h"

using namespace gpuckpt;
using gpuckpt::test::TempDir;

namespace {

std::filesystem::path write_log(const TempDir& dir, const std::string& text) {
  auto path = dir.path / "dump.log";
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("criu_log_reasons puts gpuckpt's refusal first and leaves out the rlimit noise", "[unit]") {
  TempDir dir;
  auto log = write_log(dir,
                       "(00.000288) sockets: Probing sock diag modules\n"
                       "(00.211969) Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted\n"
                       "(00.053771) gpuckpt: cuda: refusing to checkpoint: NCCL/CUDA IPC between processes 692 and 691 (691 is not part of this dump)\n"
                       "(00.060000) Error (criu/cr-dump.c:2093): Pre-dump plugins failed\n"
                       "(00.070000) Error (criu/cr-dump.c:2110): Dumping FAILED.\n");
  const std::string reasons = criu_log_reasons(log);
  CHECK(reasons.rfind("(00.053771) gpuckpt: cuda: refusing to checkpoint: NCCL/CUDA IPC", 0) == 0);
  CHECK(reasons.find("Dumping FAILED.") != std::string::npos);
  CHECK(reasons.find("RLIMIT_NOFILE") == std::string::npos);
}

TEST_CASE("criu_log_reasons keeps the last four reasons, each cut at 600 characters", "[unit]") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 6; ++i) text += "(0" + std::to_string(i) + ".0) Error (criu/x.c:1): reason " + std::to_string(i) + "\n";
  text += "(09.0) Error (criu/sk-inet.c:200): inet: Connected TCP socket, consider using --tcp-established option." +
          std::string(1000, 'x') + "\n";
  const std::string reasons = criu_log_reasons(write_log(dir, text));
  CHECK(reasons.find("reason 2") == std::string::npos);
  CHECK(reasons.find("reason 3") != std::string::npos);
  CHECK(reasons.find("Connected TCP socket") != std::string::npos);
  CHECK(reasons.size() < 4 * 600 + 3 * 3 + 1);
}

TEST_CASE("criu_log_reasons is empty for a missing log or one without errors", "[unit]") {
  TempDir dir;
  CHECK(criu_log_reasons(dir.path / "missing.log").empty());
  CHECK(criu_log_reasons(write_log(dir, "(00.1) Dumping finished successfully\n")).empty());
}
