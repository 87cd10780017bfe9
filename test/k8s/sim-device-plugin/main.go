// sim-device-plugin is a test fixture for the real kubelet: a device plugin speaking the kubelet's
// deviceplugin/v1beta1 API that advertises simulated GPUs as one extended resource (nvidia.com/gpu by default).
// The kubelet's device manager chooses which of them a container gets; on Allocate the plugin answers as the
// NVIDIA device plugin does with its envvar strategy: the GPU's node as /dev/nvidiaN and
// NVIDIA_VISIBLE_DEVICES naming the allocated GPUs. The nodes are whatever the test made (a simulated node's
// /dev/nvidiaN, made with /dev/null's or /dev/zero's numbers), so a container gets a device it may open and
// the kubelet's PodResources API reports the allocation by the IDs given here.
//
// Usage:
//
//	sim-device-plugin --plugin-dir DIR --device ID=INDEX:HOST_NODE [--device ...] [--resource NAME]
//
// DIR is the kubelet's device-plugins directory (holding kubelet.sock). ID is what kubelet allocates and
// reports (the GPU's UUID, as the NVIDIA plugin reports it), INDEX the GPU's number on the node (/dev/nvidiaINDEX
// in the container, INDEX in NVIDIA_VISIBLE_DEVICES), HOST_NODE the device node to give the container.
// It prints "registered" once the kubelet accepted it and on SIGTERM or SIGINT removes its socket and exits 0.
// Exit 2: bad command line; 1: cannot serve or register, or the kubelet restarted (a starting kubelet's device
// manager deletes every socket in DIR, this plugin's too: start the plugin again).
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
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type simulatedGpu struct {
	id       string
	index    int
	hostNode string
}

type devicesFlag []simulatedGpu

func (d *devicesFlag) String() string { return fmt.Sprint(len(*d)) }

func (d *devicesFlag) Set(value string) error {
	id, rest, ok := strings.Cut(value, "=")
	index, node, ok2 := strings.Cut(rest, ":")
	n, err := strconv.Atoi(index)
	if !ok || !ok2 || id == "" || node == "" || err != nil || n < 0 {
		return fmt.Errorf("--device %q: want ID=INDEX:HOST_NODE, e.g. GPU-0123=0:/run/node/dev/nvidia0", value)
	}
	if _, err := os.Stat(node); err != nil {
		return fmt.Errorf("--device %q: host node %s: %v", value, node, err)
	}
	*d = append(*d, simulatedGpu{id: id, index: n, hostNode: node})
	return nil
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	gpus map[string]simulatedGpu
	stop chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	var devices []*pluginapi.Device
	for _, g := range p.gpus {
		devices = append(devices, &pluginapi.Device{ID: g.id, Health: pluginapi.Healthy})
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
				ContainerPath: fmt.Sprintf("/dev/nvidia%d", g.index), HostPath: g.hostNode, Permissions: "rw"})
			indexes = append(indexes, strconv.Itoa(g.index))
		}
		c.Envs["NVIDIA_VISIBLE_DEVICES"] = strings.Join(indexes, ",")
		resp.ContainerResponses = append(resp.ContainerResponses, c)
		fmt.Printf("allocate %s\n", strings.Join(container.DevicesIds, ","))
	}
	return resp, nil
}

func register(pluginDir, endpoint, resource string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(pluginDir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource})
	return err
}

// kubeletSocketID identifies kubelet.sock's current incarnation: a restarted kubelet re-creates it.
func kubeletSocketID(pluginDir string) (uint64, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(pluginDir, "kubelet.sock"), &st); err != nil {
		return 0, false
	}
	return st.Ino, true
}

func run() error {
	var gpus devicesFlag
	pluginDir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugins directory")
	resource := flag.String("resource", "nvidia.com/gpu", "the extended resource the GPUs are advertised as")
	flag.Var(&gpus, "device", "ID=INDEX:HOST_NODE, once per simulated GPU")
	flag.Parse()
	if len(gpus) == 0 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: sim-device-plugin --plugin-dir DIR --device ID=INDEX:HOST_NODE [--device ...] [--resource NAME]")
		os.Exit(2)
	}
	p := &plugin{gpus: map[string]simulatedGpu{}, stop: make(chan struct{})}
	for _, g := range gpus {
		if _, dup := p.gpus[g.id]; dup {
			fmt.Fprintf(os.Stderr, "sim-device-plugin: --device %s given twice\n", g.id)
			os.Exit(2)
		}
		p.gpus[g.id] = g
	}

	endpoint := fmt.Sprintf("sim-gpu-%d.sock", os.Getpid())
	socket := filepath.Join(*pluginDir, endpoint)
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	defer os.Remove(socket)
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := kubeletSocketID(*pluginDir); ok {
			if err = register(*pluginDir, endpoint, *resource); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("no kubelet.sock")
			}
			return fmt.Errorf("register with the kubelet in %s within 30 s: %w", *pluginDir, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	registeredID, _ := kubeletSocketID(*pluginDir)
	fmt.Printf("registered %s with %d GPUs\n", *resource, len(p.gpus))

	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-signals:
			close(p.stop)
			server.Stop()
			return nil
		case err := <-served:
			return fmt.Errorf("serve %s: %w", socket, err)
		case <-ticker.C:
			if id, ok := kubeletSocketID(*pluginDir); !ok || id != registeredID {
				server.Stop()
				return errors.New("the kubelet restarted (kubelet.sock re-created), which removed this plugin's socket")
			}
		}
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sim-device-plugin:", err)
		os.Exit(1)
	}
}
