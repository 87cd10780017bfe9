// The CUDA backend of the stand-in plugin (test/criu-plugin/stand-in/gpuckpt_plugin.so): the installed plugin's entry
// and backend on the node's dependencies, plus the stand-ins of CRIU's environment (stand_ins.h), so e2e tests move
// a plain process's "staging memory" with real CRIU on a machine without a GPU. Never installed on a node.
#include "criu-plugin/backend.h"
#include "criu-plugin/cuda/cuda_backend.h"
#include "test/criu-plugin/stand_in/stand_ins.h"

namespace gpuckpt::plugin {

std::unique_ptr<Backend> make_cuda_backend() {
  cuda::CudaBackendDeps deps = cuda::node_deps();
  deps.stand_ins = cuda::stand_in::from_env();
  return cuda::make_cuda_backend(std::move(deps));
}

}  // namespace gpuckpt::plugin
