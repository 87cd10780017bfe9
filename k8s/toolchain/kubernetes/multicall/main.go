// multicall is kubelet, kube-apiserver, kube-scheduler, kube-controller-manager and kubectl in one program, chosen by the name it is run as (a link named
// kubelet runs the kubelet), the way Kubernetes' hyperkube was: each command is the one its own main package in
// k8s.io/kubernetes/cmd builds, so the programs are those of scripts/setup-k8s.sh, but the code they share is in
// the file once. test/gpu/make_device_carry.sh --k8s builds it: the GPU machine gets everything it runs through a
// 64 MiB carry, and five separate programs would not fit with the rest.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // kube-apiserver's: time zones for CronJob

	// kubectl's: client auth plugins
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	switch name := filepath.Base(os.Args[0]); name {
	case "kubelet":
		os.Exit(cli.Run(kubelet.NewKubeletCommand(context.Background())))
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kubectl":
		// as cmd/kubectl: the verbosity before the commands are built (plugins, .kuberc)
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	default:
		fmt.Fprintf(os.Stderr, "%s: run me as kubelet, kube-apiserver, kube-scheduler, kube-controller-manager or kubectl (a link of that name)\n", name)
		os.Exit(2)
	}
}
