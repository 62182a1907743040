// Command hsbx gives programs a persistent, hardened sandbox container by
// driving the docker or podman CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hsbx/hsbx/internal/cli"
)

func main() { os.Exit(run()) }

// run wires the process to the CLI: the first SIGINT, SIGTERM or SIGHUP
// cancels the context (hsbx then kills what it started and exits 128+N);
// a second one exits at once.
func run() int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		cancel(&cli.SignalError{Signal: s})
		s = <-sigs
		os.Exit(128 + int(s.(syscall.Signal)))
	}()
	cwd, _ := os.Getwd()
	return cli.Main(ctx, cli.Env{
		Args: os.Args[1:], Environ: os.Environ(), Cwd: cwd,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	})
}
