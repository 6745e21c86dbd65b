package main

import (
	"os"

	"github.com/spf13/pflag"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/cmd"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

// runKwok mirrors kwok's own main: its global flags (--config, logging) are parsed by a
// separate flag set before the cobra command sees the rest.
func runKwok(args []string) int {
	os.Args = append([]string{"kwok"}, args...)
	// Kubernetes' component-base registers a non-bool --version on the global flag set,
	// which cobra would then merge into kwok's command; kwok needs its own bool one.
	pflag.CommandLine = pflag.NewFlagSet("kwok", pflag.ExitOnError)
	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsAllowlist.UnknownFlags = true
	flagset.Usage = func() {}

	ctx := signals.SetupSignalContext()
	ctx, logger := log.InitFlags(ctx, flagset)
	ctx, err := config.InitFlags(ctx, flagset)
	if err != nil {
		logger.Error("init config flags", "err", err)
		return 1
	}
	command := cmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flagset)
	command.SetArgs(args)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("kwok exited", "err", err)
		return 1
	}
	return 0
}
