// gpuckpt-store-fixture STORE OUT SEED...: writes a store-backed checkpoint of one process (vpid 7) whose GPU
// memory is one random 64 KiB chunk per SEED (test/support/store_checkpoint_writer.h) into the chunk store STORE,
// and its podman-shaped archive to OUT; prints the checkpoint id. Two checkpoints that share seeds share those
// chunks: what the shell tests of transfers between two agents' stores need (archive_transfer_e2e_test.sh).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gpumem/chunk_store.h"
#include "test/support/store_checkpoint_writer.h"
#include "test/support/temp_dir.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: gpuckpt-store-fixture STORE OUT SEED...\n");
    return 2;
  }
  std::vector<std::vector<std::byte>> chunks;
  for (int i = 3; i < argc; ++i) {
    const std::string seed = argv[i];
    if (seed.empty() || seed.size() > 9 || seed.find_first_not_of("0123456789") != std::string::npos) {
      std::fprintf(stderr, "gpuckpt-store-fixture: seed '%s' is not a number\n", argv[i]);
      return 2;
    }
    chunks.push_back(gpuckpt::test::random_chunk(static_cast<unsigned>(std::stoul(seed))));
  }
  auto opened = gpuckpt::chunk_store::Store::open(argv[1], true);
  if (!opened) {
    std::fprintf(stderr, "gpuckpt-store-fixture: %s\n", opened.error().message.c_str());
    return 1;
  }
  std::shared_ptr<gpuckpt::chunk_store::Store> store(std::move(*opened));
  gpuckpt::test::TempDir dir("gpuckpt-store-fixture");
  auto made = gpuckpt::test::write_store_checkpoint(store, dir.path, {{7, std::move(chunks)}});
  if (!made) {
    std::fprintf(stderr, "gpuckpt-store-fixture: %s\n", made.error().message.c_str());
    return 1;
  }
  std::error_code ec;
  std::filesystem::copy_file(made->archive, argv[2], ec);
  if (ec) {
    std::fprintf(stderr, "gpuckpt-store-fixture: cannot write %s: %s\n", argv[2], ec.message().c_str());
    return 1;
  }
  std::printf("%s\n", made->id.c_str());
  return 0;
}
