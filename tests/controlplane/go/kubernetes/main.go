// Command kube is one binary for the four Kubernetes programs the tests run.
// It picks the program from the name it was called by (a symlink such as
// bin/kube-apiserver) or, failing that, from its first argument
// (`kube kube-apiserver --flags...`). One binary links the shared
// dependencies once, which keeps the cold build and the cache small.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata"

	"github.com/spf13/cobra"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// programs maps each program name to the constructor of its root command.
var programs = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubectl":                 kubectl.NewDefaultKubectlCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := programs[name]; !ok && len(os.Args) > 1 {
		// Called as `kube <program> ...`: shift so the program sees its usual argv.
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	newCommand, ok := programs[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "usage: kube {kube-apiserver|kube-controller-manager|kube-scheduler|kubectl} [flags]\n")
		os.Exit(2)
	}
	command := newCommand()
	if name == "kubectl" {
		// kubectl prints its own errors (as upstream's main does).
		if err := cli.RunNoErrOutput(command); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	os.Exit(cli.Run(command))
}
