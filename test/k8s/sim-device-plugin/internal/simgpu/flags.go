// Package simgpu holds what the test fixtures sim-device-plugin and sim-dra-driver both read from their command
// lines: the simulated (or real) GPUs they advertise and the device nodes every allocation gets besides.
package simgpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// GPU is one --device ID=INDEX:HOST_NODE: the id the kubelet reports (the GPU's UUID), the GPU's number on the
// node (/dev/nvidiaINDEX in the container) and the host device node behind it.
type GPU struct {
	ID       string
	Index    int
	HostNode string
}

// ParseDevice reads ID=INDEX:HOST_NODE; the host node must exist.
func ParseDevice(value string) (GPU, error) {
	id, rest, ok := strings.Cut(value, "=")
	index, node, ok2 := strings.Cut(rest, ":")
	n, err := strconv.Atoi(index)
	if !ok || !ok2 || id == "" || !filepath.IsAbs(node) || err != nil || n < 0 {
		return GPU{}, fmt.Errorf("--device %q: want ID=INDEX:HOST_NODE, e.g. GPU-0123=0:/run/node/dev/nvidia0", value)
	}
	if _, err := os.Stat(node); err != nil {
		return GPU{}, fmt.Errorf("--device %q: host node %s: %v", value, node, err)
	}
	return GPU{ID: id, Index: n, HostNode: node}, nil
}

// ParseSharedDevice reads HOST_NODE[:CONTAINER_PATH] (absolute paths; the container path defaults to the host's);
// the host node must exist.
func ParseSharedDevice(value string) (host, container string, err error) {
	host, container, _ = strings.Cut(value, ":")
	if container == "" {
		container = host
	}
	if !filepath.IsAbs(host) || !filepath.IsAbs(container) {
		return "", "", fmt.Errorf("--shared-device %q: want HOST_NODE[:CONTAINER_PATH], absolute paths, e.g. /dev/nvidiactl", value)
	}
	if _, err := os.Stat(host); err != nil {
		return "", "", fmt.Errorf("--shared-device %q: %v", value, err)
	}
	return host, container, nil
}

// Devices is the repeatable --device flag (flag.Value).
type Devices []GPU

func (d *Devices) String() string { return fmt.Sprint(len(*d)) }

func (d *Devices) Set(value string) error {
	g, err := ParseDevice(value)
	if err == nil {
		*d = append(*d, g)
	}
	return err
}
