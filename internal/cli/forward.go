package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/sandbox/forward"
)

// ForwardCmd forwards a local port to a port in the sandbox.
type ForwardCmd struct {
	taskFlag
	User    string `short:"u" help:"Connect as this user of the sandbox (NAME, UID, NAME:GROUP or UID:GID)." placeholder:"USER"`
	Address string `help:"The host address to listen on: loopback unless you say otherwise (0.0.0.0 lets anyone who can reach this host in)." default:"127.0.0.1" placeholder:"ADDR"`
	Ports   string `arg:"" help:"[LOCAL:]PORT: listen on LOCAL (default: PORT; 0: any free one) and forward to PORT in the sandbox." placeholder:"[LOCAL:]PORT"`
}

func (c *ForwardCmd) settingFlags() []config.Flag { return c.flags() }

// Help is shown under the usage line.
func (c *ForwardCmd) Help() string {
	return `Each connection to the local port is relayed by hsbx's agent to the port
on the sandbox's loopback, as kubectl port-forward does: it works with
network = off, on every engine and on Kubernetes. It runs until
interrupted, or until the sandbox stops (exit 1). Once listening it says
where on stderr (--json: {"address","port"} on stdout).`
}

// Run implements the command.
func (c *ForwardCmd) Run(ctx context.Context, app *App) error {
	local, remote, two := strings.Cut(c.Ports, ":")
	if !two {
		local, remote = c.Ports, c.Ports
	}
	port, err1 := strconv.Atoi(remote)
	lport, err2 := strconv.Atoi(local)
	if err := errors.Join(err1, err2); err != nil || port < 1 || port > 65535 || lport < 0 || lport > 65535 {
		return &usageError{fmt.Errorf("%q is not [LOCAL:]PORT", c.Ports), "give a port in the sandbox, like 8080, or LOCAL:PORT, like 0:8080 (0: any free local port)"}
	}
	if net.ParseIP(c.Address) == nil {
		return &usageError{fmt.Errorf("--address %q is not an IP address", c.Address), "give one of this host's addresses, like 127.0.0.1"}
	}
	sb, err := app.sandbox(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := sb.Close(context.WithoutCancel(ctx)); cerr != nil {
			app.warn(fmt.Sprintf("removing the per-process sandbox: %v", cerr))
		}
	}()
	if _, err := sb.Ensure(ctx); err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(c.Address, strconv.Itoa(lport)))
	if err != nil {
		return fmt.Errorf("listening for the forward: %w", err)
	}
	at := ln.Addr().(*net.TCPAddr)
	if app.G.JSON {
		fmt.Fprintf(app.Env.Stdout, "{\"address\":%q,\"port\":%d}\n", at.String(), port)
	} else {
		fmt.Fprintf(app.Env.Stderr, "hsbx: forwarding %s to port %d in sandbox %s (Ctrl-C ends it)\n", at, port, sb.Name())
	}
	err = forward.Run(ctx, sb, ln, forward.Options{Port: port, User: c.User})
	if err == nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}
