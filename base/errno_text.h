// The text of an errno value for a message ("No such file or directory"), the one definition every room and part
// uses. std::generic_category's message is strerror's text without strerror's shared buffer, so threads may call it.
#pragma once

#include <string>
#include <system_error>

namespace gpuckpt {

inline std::string errno_text(int err) { return std::generic_category().message(err); }

}  // namespace gpuckpt
