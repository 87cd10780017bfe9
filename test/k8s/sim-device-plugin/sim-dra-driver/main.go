// sim-dra-driver is a test fixture for the real kubelet and scheduler: a Dynamic Resource Allocation driver for
// simulated GPUs, built on the upstream kubelet-plugin library (k8s.io/dynamic-resource-allocation/kubeletplugin),
// so the kubelet talks to it exactly as to a vendor's DRA driver (plugin registration, then dra/v1
// NodePrepareResources / NodeUnprepareResources on its own socket).
//
// It publishes one ResourceSlice for its node: a pool named after the node with one device per --device, named
// gpu-INDEX, with the attributes index (int) and uuid (string). The scheduler allocates from it for a
// ResourceClaim whose request names the DeviceClass the test makes (selector: this driver). On
// NodePrepareResources it writes one CDI spec file per claim (kind KIND, one CDI device per allocated GPU, named
// CLAIM_UID-gpu-INDEX, whose containerEdits give the GPU's node as /dev/nvidiaINDEX and NVIDIA_VISIBLE_DEVICES as
// the NVIDIA DRA driver's CDI specs do) into --cdi-dir and answers the CDI names; the kubelet hands them to the
// runtime (containerd with CDI on injects the nodes) and reports them, with driver, pool and device name, in its
// PodResources API. NodeUnprepareResources removes the claim's spec file.
//
// Usage:
//
//	sim-dra-driver --kubeconfig FILE --node NAME --registry-dir DIR --plugin-dir DIR --cdi-dir DIR
//	               --device UUID=INDEX:HOST_NODE [--device ...] [--shared-device HOST_NODE[:CONTAINER_PATH] ...]
//	               [--driver NAME] [--cdi-kind VENDOR/CLASS]
//
// A shared device (on a real GPU node /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools) goes into every claim's
// spec as spec-wide containerEdits, as the NVIDIA DRA driver puts the driver's control nodes.
// DIR of --registry-dir is the kubelet's plugin registry (ROOT_DIR/plugins_registry), --plugin-dir where the
// driver's own socket goes (the kubelet dials it at the path the registration names). It prints "prepare CLAIM
// DEVICES" and "unprepare CLAIM" lines as it works and "published N devices" once its slice is written; on SIGTERM
// or SIGINT it stops (its slice stays: the test's cluster goes with it). Exit 2: bad command line; 1: cannot start.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"gpuckpt.local/test/k8s/sim-device-plugin/internal/simgpu"
)

func deviceName(g simgpu.GPU) string { return fmt.Sprintf("gpu-%d", g.Index) }

type driver struct {
	name    string
	pool    string
	cdiDir  string
	cdiKind string
	gpus    map[string]simgpu.GPU // by device name
	shared  []cdiDeviceNode
	mu      sync.Mutex
}

// CDI spec, the fields this driver writes (github.com/cncf-tags/container-device-interface SPEC.md, 0.6.0)
type cdiDeviceNode struct {
	Path        string `json:"path"`
	HostPath    string `json:"hostPath"`
	Type        string `json:"type"`
	Permissions string `json:"permissions"`
}
type cdiEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []cdiDeviceNode `json:"deviceNodes,omitempty"`
}
type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}
type cdiSpec struct {
	Version        string      `json:"cdiVersion"`
	Kind           string      `json:"kind"`
	ContainerEdits *cdiEdits   `json:"containerEdits,omitempty"`
	Devices        []cdiDevice `json:"devices"`
}

// sharedDevicesFlag: device nodes every claim's spec gives (--shared-device, repeatable)
type sharedDevicesFlag []cdiDeviceNode

func (d *sharedDevicesFlag) String() string { return fmt.Sprint(len(*d)) }

func (d *sharedDevicesFlag) Set(value string) error {
	host, container, err := simgpu.ParseSharedDevice(value)
	if err == nil {
		*d = append(*d, cdiDeviceNode{Path: container, HostPath: host, Type: "c", Permissions: "rw"})
	}
	return err
}

func (d *driver) specFile(claim types.UID) string {
	return filepath.Join(d.cdiDir, "sim-dra-"+string(claim)+".json")
}

func (d *driver) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)}
	}
	spec := cdiSpec{Version: "0.6.0", Kind: d.cdiKind}
	if len(d.shared) > 0 {
		spec.ContainerEdits = &cdiEdits{DeviceNodes: d.shared}
	}
	var result kubeletplugin.PrepareResult
	var names []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.name {
			continue
		}
		g, ok := d.gpus[r.Device]
		if r.Pool != d.pool || !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s/%s is not one of this driver's",
				claim.Namespace, claim.Name, r.Pool, r.Device)}
		}
		cdiName := string(claim.UID) + "-" + deviceName(g)
		spec.Devices = append(spec.Devices, cdiDevice{Name: cdiName, ContainerEdits: cdiEdits{
			Env: []string{"NVIDIA_VISIBLE_DEVICES=" + strconv.Itoa(g.Index)},
			DeviceNodes: []cdiDeviceNode{{Path: fmt.Sprintf("/dev/nvidia%d", g.Index), HostPath: g.HostNode,
				Type: "c", Permissions: "rw"}},
		}})
		result.Devices = append(result.Devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool,
			DeviceName: r.Device, CDIDeviceIDs: []string{d.cdiKind + "=" + cdiName}})
		names = append(names, r.Device)
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err == nil {
		// written then renamed: the runtime never reads half a spec
		tmp := d.specFile(claim.UID) + ".tmp"
		if err = os.WriteFile(tmp, data, 0o644); err == nil {
			err = os.Rename(tmp, d.specFile(claim.UID))
		}
	}
	if err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: CDI spec: %w", claim.Namespace, claim.Name, err)}
	}
	fmt.Printf("prepare %s/%s %s\n", claim.Namespace, claim.Name, strings.Join(names, ","))
	return result
}

func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		out[c.UID] = d.prepare(c)
	}
	return out, nil
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]error{}
	for _, c := range claims {
		err := os.Remove(d.specFile(c.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		out[c.UID] = err
		fmt.Printf("unprepare %s/%s\n", c.Namespace, c.Name)
	}
	return out, nil
}

func (d *driver) HandleError(_ context.Context, err error, msg string) {
	fmt.Fprintf(os.Stderr, "sim-dra-driver: %s: %v\n", msg, err)
}

func (d *driver) WatchHealthStatus(ctx context.Context, _ chan<- kubeletplugin.DeviceHealthReport) error {
	<-ctx.Done() // the simulated GPUs never change health
	return nil
}

var cdiKindPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*/[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

func run() error {
	var gpus simgpu.Devices
	var shared sharedDevicesFlag
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of a user that may read ResourceClaims and write ResourceSlices")
	node := flag.String("node", "", "the node's name (its ResourceSlice and pool)")
	name := flag.String("driver", "gpu.sim.gpuckpt.dev", "the DRA driver's name")
	registryDir := flag.String("registry-dir", "", "the kubelet's plugin registry directory")
	pluginDir := flag.String("plugin-dir", "", "the driver's socket directory")
	cdiDir := flag.String("cdi-dir", "", "where CDI spec files go (a CDI spec directory of the node's runtime)")
	cdiKind := flag.String("cdi-kind", "sim.gpuckpt.dev/gpu", "the CDI kind (VENDOR/CLASS) of the devices")
	flag.Var(&gpus, "device", "UUID=INDEX:HOST_NODE, once per simulated GPU")
	flag.Var(&shared, "shared-device", "HOST_NODE[:CONTAINER_PATH] every claim's spec gives (repeatable)")
	flag.Parse()
	if len(gpus) == 0 || flag.NArg() != 0 || *kubeconfig == "" || *node == "" || *registryDir == "" ||
		*pluginDir == "" || *cdiDir == "" || !cdiKindPattern.MatchString(*cdiKind) {
		fmt.Fprintln(os.Stderr, "usage: sim-dra-driver --kubeconfig FILE --node NAME --registry-dir DIR --plugin-dir DIR"+
			" --cdi-dir DIR --device UUID=INDEX:HOST_NODE [--device ...] [--shared-device HOST_NODE[:CONTAINER_PATH] ...]"+
			" [--driver NAME] [--cdi-kind VENDOR/CLASS]")
		os.Exit(2)
	}
	d := &driver{name: *name, pool: *node, cdiDir: *cdiDir, cdiKind: *cdiKind, gpus: map[string]simgpu.GPU{}, shared: shared}
	for _, g := range gpus {
		if _, dup := d.gpus[deviceName(g)]; dup {
			fmt.Fprintf(os.Stderr, "sim-dra-driver: GPU index %d given twice\n", g.Index)
			os.Exit(2)
		}
		d.gpus[deviceName(g)] = g
	}
	for _, dir := range []string{*pluginDir, *cdiDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", *kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	nodeObject, err := client.CoreV1().Nodes().Get(ctx, *node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", *node, err)
	}
	helper, err := kubeletplugin.Start(ctx, d, kubeletplugin.DriverName(*name), kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(*node), kubeletplugin.NodeUID(nodeObject.UID),
		kubeletplugin.RegistrarDirectoryPath(*registryDir), kubeletplugin.PluginDataDirectoryPath(*pluginDir))
	if err != nil {
		return fmt.Errorf("start the kubelet plugin: %w", err)
	}
	defer helper.Stop()

	var devices []resourceapi.Device
	for _, g := range d.gpus {
		devices = append(devices, resourceapi.Device{Name: deviceName(g), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"index": {IntValue: ptr.To(int64(g.Index))},
			"uuid":  {StringValue: ptr.To(g.ID)},
		}})
	}
	sort.Slice(devices, func(i, j int) bool { return devices[i].Name < devices[j].Name })
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.pool: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}); err != nil {
		return fmt.Errorf("publish the ResourceSlice: %w", err)
	}
	// published once the API server lists the slice
	deadline := time.Now().Add(30 * time.Second)
	for {
		slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: "spec.driver=" + *name + ",spec.nodeName=" + *node})
		if err == nil && len(slices.Items) > 0 && len(slices.Items[0].Spec.Devices) == len(devices) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the ResourceSlice of %s for node %s is not listed within 30 s (last error: %v)", *name, *node, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Printf("published %d devices\n", len(devices))
	<-ctx.Done()
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sim-dra-driver:", err)
		os.Exit(1)
	}
}
