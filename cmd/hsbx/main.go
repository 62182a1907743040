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

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cli.Main(ctx, cli.Env{
		Args: os.Args[1:], Environ: os.Environ(),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	})
}
