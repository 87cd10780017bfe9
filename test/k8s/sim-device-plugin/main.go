// sim-device-plugin is a test fixture for the real kubelet: a device plugin speaking the kubelet's
// deviceplugin/v1beta1 API that advertises simulated GPUs as one extended resource (nvidia.com/gpu by default).
// The kubelet's device manager chooses which of them a container gets; on Allocate the plugin answers as the
// NVIDIA device plugin does with its envvar strategy: the GPU's node as /dev/nvidiaN and
// NVIDIA_VISIBLE_DEVICES naming the allocated GPUs. The nodes are whatever the test made (a simulated node's
// /dev/nvidiaN, made with /dev/null's or /dev/zero's numbers), so a container gets a device it may open and
// the kubelet's PodResources API reports the allocation by the IDs given here. On a real GPU node the same plugin
// advertises the real GPUs (HOST_NODE /dev/nvidiaN) and, with --shared-device, gives every allocation the nodes
// all CUDA processes open besides their GPU's own (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools), as
// the NVIDIA device plugin does with --pass-device-specs.
//
// Usage:
//
//	sim-device-plugin --registry-dir DIR --device ID=INDEX:HOST_NODE [--device ...]
//	                  [--shared-device HOST_NODE[:CONTAINER_PATH] ...] [--resource NAME]
//
// DIR is the kubelet's plugin registry (ROOT_DIR/plugins_registry). The plugin registers the way CSI and DRA
// drivers do: the kubelet's plugin watcher finds its socket there, asks GetInfo (type DevicePlugin) and then talks
// deviceplugin/v1beta1 to the same socket. (The other way, Register on device-plugins/kubelet.sock, cannot tell
// two kubelets of one machine apart: every kubelet serves that socket at the fixed /var/lib/kubelet path,
// whatever its --root-dir.) ID is what the kubelet allocates and reports (the GPU's UUID, as the NVIDIA plugin
// reports it), INDEX the GPU's number on the node (/dev/nvidiaINDEX in the container, INDEX in
// NVIDIA_VISIBLE_DEVICES), HOST_NODE the device node to give the container.
// A shared device appears in the container at CONTAINER_PATH (default: its host path), once per container whatever
// the number of GPUs.
// It prints "registered" once the kubelet confirmed the registration and one "allocate IDS" line per allocated
// container; on SIGTERM or SIGINT it removes its socket and exits 0. Exit 2: bad command line; 1: cannot serve,
// or the kubelet rejected it or did not register it within 30 s.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"gpuckpt.local/test/k8s/sim-device-plugin/internal/simgpu"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// sharedDevicesFlag: device nodes every allocation gets (--shared-device, repeatable)
type sharedDevicesFlag []*pluginapi.DeviceSpec

func (d *sharedDevicesFlag) String() string { return fmt.Sprint(len(*d)) }

func (d *sharedDevicesFlag) Set(value string) error {
	host, container, err := simgpu.ParseSharedDevice(value)
	if err == nil {
		*d = append(*d, &pluginapi.DeviceSpec{ContainerPath: container, HostPath: host, Permissions: "rw"})
	}
	return err
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	gpus   map[string]simgpu.GPU
	shared []*pluginapi.DeviceSpec
	stop   chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	var devices []*pluginapi.Device
	for _, g := range p.gpus {
		devices = append(devices, &pluginapi.Device{ID: g.ID, Health: pluginapi.Healthy})
	}
	sort.Slice(devices, func(i, j int) bool { return devices[i].ID < devices[j].ID })
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	// The simulated GPUs never change health: hold the stream open until the kubelet or this plugin goes.
	select {
	case <-stream.Context().Done():
	case <-p.stop:
	}
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, container := range req.ContainerRequests {
		c := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		var indexes []string
		for _, id := range container.DevicesIds {
			g, ok := p.gpus[id]
			if !ok {
				return nil, fmt.Errorf("allocate: unknown device %q (this plugin advertises %d GPUs)", id, len(p.gpus))
			}
			c.Devices = append(c.Devices, &pluginapi.DeviceSpec{
				ContainerPath: fmt.Sprintf("/dev/nvidia%d", g.Index), HostPath: g.HostNode, Permissions: "rw"})
			indexes = append(indexes, strconv.Itoa(g.Index))
		}
		c.Devices = append(c.Devices, p.shared...)
		c.Envs["NVIDIA_VISIBLE_DEVICES"] = strings.Join(indexes, ",")
		resp.ContainerResponses = append(resp.ContainerResponses, c)
		fmt.Printf("allocate %s\n", strings.Join(container.DevicesIds, ","))
	}
	return resp, nil
}

// registration answers the kubelet's plugin watcher (pluginregistration/v1) on the plugin's socket.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	resource string
	status   chan *registerapi.RegistrationStatus
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: r.resource,
		SupportedVersions: []string{pluginapi.Version}}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	select {
	case r.status <- s:
	default:
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func run() error {
	var gpus simgpu.Devices
	var shared sharedDevicesFlag
	registryDir := flag.String("registry-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registry directory")
	resource := flag.String("resource", "nvidia.com/gpu", "the extended resource the GPUs are advertised as")
	flag.Var(&gpus, "device", "ID=INDEX:HOST_NODE, once per simulated GPU")
	flag.Var(&shared, "shared-device", "HOST_NODE[:CONTAINER_PATH] every allocation gets (repeatable)")
	flag.Parse()
	if len(gpus) == 0 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: sim-device-plugin --registry-dir DIR --device ID=INDEX:HOST_NODE [--device ...]"+
			" [--shared-device HOST_NODE[:CONTAINER_PATH] ...] [--resource NAME]")
		os.Exit(2)
	}
	p := &plugin{gpus: map[string]simgpu.GPU{}, shared: shared, stop: make(chan struct{})}
	for _, g := range gpus {
		if _, dup := p.gpus[g.ID]; dup {
			fmt.Fprintf(os.Stderr, "sim-device-plugin: --device %s given twice\n", g.ID)
			os.Exit(2)
		}
		p.gpus[g.ID] = g
	}

	socket := filepath.Join(*registryDir, fmt.Sprintf("sim-gpu-%d.sock", os.Getpid()))
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	defer os.Remove(socket)
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	reg := &registration{resource: *resource, status: make(chan *registerapi.RegistrationStatus, 1)}
	registerapi.RegisterRegistrationServer(server, reg)
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	timeout := time.After(30 * time.Second)
	for {
		select {
		case s := <-reg.status:
			if !s.PluginRegistered {
				server.Stop()
				return fmt.Errorf("the kubelet rejected the plugin: %s", s.Error)
			}
			fmt.Printf("registered %s with %d GPUs\n", *resource, len(p.gpus))
			timeout = nil
		case <-timeout:
			server.Stop()
			return errors.New("the kubelet did not register the plugin within 30 s (is " + *registryDir +
				" the plugins_registry of a running kubelet?)")
		case <-signals:
			close(p.stop)
			server.Stop()
			return nil
		case err := <-served:
			return fmt.Errorf("serve %s: %w", socket, err)
		}
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sim-device-plugin:", err)
		os.Exit(1)
	}
}
