// Command cluster is a multi-call binary holding a whole local Kubernetes control plane:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, each started
// as its own process by the `up` launcher. One binary keeps the cold build to a single
// link of the shared Kubernetes packages, and one cache entry to reuse.
//
// Dispatch is on argv[0] (a symlink named after the component) or, failing that, on
// the first argument: `cluster kube-apiserver --flags...`.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if _, ok := components[name]; !ok && len(args) > 0 {
		name, args = args[0], args[1:]
	}
	run, ok := components[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "usage: cluster COMPONENT [flags]\ncomponents: %s\n", strings.Join(componentNames(), ", "))
		os.Exit(2)
	}
	os.Exit(run(args))
}

var components = map[string]func([]string) int{
	"etcd": func(args []string) int {
		etcdmain.Main(append([]string{"etcd"}, args...))
		return 0
	},
	"kube-apiserver": func(args []string) int {
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kube-controller-manager": func(args []string) int {
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kube-scheduler": func(args []string) int {
		cmd := scheduler.NewSchedulerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kwok":        runKwok,
	"kwok-stages": printKwokStages,
	"version": func([]string) int {
		fmt.Println(k8sVersion)
		return 0
	},
}

func componentNames() []string {
	var names []string
	for n := range components {
		names = append(names, n)
	}
	return names
}

// printKwokStages writes kwok's own default stages (the ones kwokctl installs) as one
// config document stream: Nodes are initialised Ready and keep a Lease heartbeat; Pods
// bound to a kwok node become Running and Ready, complete and are deleted as on a real
// kubelet. Taken from the kwok module so they track the pinned release.
func printKwokStages([]string) int {
	for _, doc := range []string{
		nodefast.DefaultNodeInit,
		nodeheartbeat.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	} {
		fmt.Println("---")
		fmt.Println(strings.TrimSpace(doc))
	}
	return 0
}
