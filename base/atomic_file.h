// Files gpuckpt keeps in its state directories (plans, records, indexes, labels): written whole or not at all, and
// named by ids that are safe as file names.
#pragma once

#include <filesystem>
#include <string_view>

#include "base/result.h"

namespace gpuckpt {

// fsyncs the directory holding `path`, so that a rename into it survives a crash of the node.
void sync_parent_directory(const std::filesystem::path& path);

// Writes `data` to `path` through a temporary sibling, fsync and rename (readers never see a partial file).
Result<void> write_file_atomically(const std::filesystem::path& path, std::string_view data);

// Ids the agent generates and accepts: [A-Za-z0-9][A-Za-z0-9._-]{0,127}, so they are safe as file names.
bool is_safe_id(std::string_view id);

}  // namespace gpuckpt
