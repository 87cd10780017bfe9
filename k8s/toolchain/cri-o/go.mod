// Builds crio (CRI-O) for the cluster and CRI-O tests from the Go module proxy; pinns from the same module's C source.
module gpuckpt.local/k8s-toolchain/cri-o

go 1.26.3

require github.com/cri-o/cri-o v1.36.3 // indirect
