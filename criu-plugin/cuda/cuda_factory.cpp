// The CUDA backend the plugin's entry (plugin.cpp) starts: the one built on what the node has. Its own target, so a
// plugin built for tests can start the backend on other dependencies with the same entry.
#include "criu-plugin/cuda/cuda_backend.h"

namespace gpuckpt::plugin {

std::unique_ptr<Backend> make_cuda_backend() { return cuda::make_cuda_backend(cuda::node_deps()); }

}  // namespace gpuckpt::plugin
