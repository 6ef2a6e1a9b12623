// space-k8s-node: one multi-call binary holding the official kubelet,
// kube-controller-manager and kube-proxy, built from the published Go modules
// (the node side of the test cluster; scripts/setup/k8s builds the apiserver,
// scheduler and etcd). Used only by SPACE's tests and lab (never in production).
//
//	space-k8s-node kubelet <kubelet flags>
//	space-k8s-node controller-manager <kube-controller-manager flags>
//	space-k8s-node proxy <kube-proxy flags>
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as the official kube-controller-manager

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name == "space-k8s-node" || name == "main" {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, "usage: space-k8s-node kubelet|controller-manager|proxy [flags]")
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	os.Args = append([]string{name}, args...)
	switch name {
	case "kubelet":
		os.Exit(cli.Run(kubelet.NewKubeletCommand(context.Background())))
	case "controller-manager", "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "proxy", "kube-proxy":
		os.Exit(cli.Run(proxy.NewProxyCommand()))
	case "version":
		fmt.Println("space-k8s-node", version)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", name)
		os.Exit(2)
	}
}
