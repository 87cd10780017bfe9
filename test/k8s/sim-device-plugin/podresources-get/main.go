// podresources-get asks a kubelet's PodResources API (v1 Get) which devices it allocated to one container and
// prints them, one "RESOURCE DEVICE_ID" line each for device plugins' devices and one
// "dra CLAIM_NAMESPACE/CLAIM DRIVER POOL/DEVICE CDI_NAME[,CDI_NAME...]" line for each device a DRA driver prepared
// for one of its ResourceClaims: the tests' view of what the real kubelet reports, beside what gpuckpt-nri reads
// from the same socket.
//
// Usage: podresources-get SOCKET NAMESPACE POD CONTAINER
//
// Exit 0: printed (nothing when the container has no devices); 1: the call failed, or the kubelet does not list
// the container in that pod; 2: bad command line.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: podresources-get SOCKET NAMESPACE POD CONTAINER")
		os.Exit(2)
	}
	socket, namespace, pod, container := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "podresources-get:", err)
		os.Exit(1)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).Get(ctx,
		&podresourcesapi.GetPodResourcesRequest{PodName: pod, PodNamespace: namespace})
	if err != nil {
		fmt.Fprintf(os.Stderr, "podresources-get: Get %s/%s on %s: %v\n", namespace, pod, socket, err)
		os.Exit(1)
	}
	for _, c := range resp.GetPodResources().GetContainers() {
		if c.GetName() != container {
			continue
		}
		for _, d := range c.GetDevices() {
			for _, id := range d.GetDeviceIds() {
				fmt.Println(d.GetResourceName(), id)
			}
		}
		for _, claim := range c.GetDynamicResources() {
			for _, r := range claim.GetClaimResources() {
				var cdi []string
				for _, n := range r.GetCdiDevices() {
					cdi = append(cdi, n.GetName())
				}
				fmt.Printf("dra %s/%s %s %s/%s %s\n", claim.GetClaimNamespace(), claim.GetClaimName(), r.GetDriverName(),
					r.GetPoolName(), r.GetDeviceName(), strings.Join(cdi, ","))
			}
		}
		return
	}
	fmt.Fprintf(os.Stderr, "podresources-get: the kubelet lists no container %q in pod %s/%s\n", container, namespace, pod)
	os.Exit(1)
}
