// Command hsbx gives programs a persistent, hardened sandbox container by
// driving the docker or podman CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/internal/agent"
	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/internal/cli"
)

func main() { os.Exit(run()) }

// run wires the process to the CLI: the first SIGINT, SIGTERM, SIGHUP or
// SIGQUIT cancels the context (hsbx then kills what it started and exits
// 128+N); a second one exits at once. SIGPIPE is caught, so a write to a
// closed stdout fails with EPIPE and hsbx can stop the command in the
// sandbox before it exits 141, instead of dying on the spot.
func run() int {
	if agentapi.InvokedAsAgent(os.Args[0]) {
		// Inside a sandbox, as the exec channel's agent (exec_channel_agent
		// may name hsbx itself): nothing but stdio. Only under the
		// agent's own name: on the host, `hsbx forward 8080` is the
		// command, and no mode word runs the agent.
		code, ok := agent.RunMode(os.Args[1:], "hsbx "+cli.BuildVersion())
		if !ok {
			os.Stderr.WriteString("hsbx agent: no such mode (hsbx runs this binary as its agent inside a sandbox)\n")
			code = 2
		}
		return code
	}
	// The docker client's ssh, when hsbx shares one connection for its
	// calls (ssh_share): it becomes the real ssh.
	hsbx.ServeSSHStandIn()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	// Installing the handlers takes a quarter of a millisecond (the
	// runtime hands each signal to a thread of its own and waits for it),
	// so it runs beside reading the configuration; Main waits for it
	// before it starts anything.
	ready := make(chan struct{})
	go func() {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
		sigs := make(chan os.Signal, 2)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
		close(ready)
		s := <-sigs
		cancel(&cli.SignalError{Signal: s})
		s = <-sigs
		os.Exit(128 + int(s.(syscall.Signal)))
	}()
	cwd, _ := os.Getwd()
	self, _ := os.Executable()
	return cli.Main(ctx, cli.Env{
		Args: os.Args[1:], Environ: os.Environ(), Cwd: cwd,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Ready: ready, SSHStandIn: self,
	})
}
