// space-k8s: one multi-call binary holding the official kube-apiserver,
// kube-scheduler and an embedded etcd, built from the published Go modules.
// Used only by SPACE's tests, benches and lab (never in production).
//
//	space-k8s apiserver <kube-apiserver flags>
//	space-k8s scheduler <kube-scheduler flags>
//	space-k8s etcd --data-dir DIR --listen-client URL [--listen-peer URL]
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name == "space-k8s" || name == "main" {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, "usage: space-k8s apiserver|scheduler|etcd [flags]")
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	os.Args = append([]string{name}, args...)
	switch name {
	case "apiserver", "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "scheduler", "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "etcd":
		runEtcd(args)
	case "version":
		fmt.Println("space-k8s", version)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", name)
		os.Exit(2)
	}
}

func runEtcd(args []string) {
	fs := flag.NewFlagSet("etcd", flag.ExitOnError)
	dataDir := fs.String("data-dir", "", "data directory")
	client := fs.String("listen-client", "http://127.0.0.1:2379", "client URL")
	peer := fs.String("listen-peer", "http://127.0.0.1:2380", "peer URL")
	_ = fs.Parse(args)
	if *dataDir == "" {
		log.Fatal("--data-dir is required")
	}
	cu, err := url.Parse(*client)
	if err != nil {
		log.Fatal(err)
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		log.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = *dataDir
	cfg.Name = "space"
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	cfg.UnsafeNoFsync = os.Getenv("SPACE_ETCD_UNSAFE_NO_FSYNC") == "1"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatal(err)
	}
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintln(os.Stderr, "etcd ready on", cu.String())
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		log.Fatal("etcd took too long to start")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
	case err := <-e.Err():
		log.Print(err)
	}
	e.Close()
}
