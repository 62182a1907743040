package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hsbx/hsbx/config"
)

// taskFlag is the --task every sandbox command takes.
type taskFlag struct {
	Task nameFlag `predictor:"task" help:"Task whose sandbox to use (task; env HSBX_TASK; default \"default\")." placeholder:"ID"`
}

func (t taskFlag) flags() []config.Flag {
	return t.Task.flag("task", "--task")
}

func (t taskFlag) settingFlags() []config.Flag { return t.flags() }

// UpCmd brings a sandbox up.
type UpCmd struct {
	taskFlag
	Image       string   `help:"Image for a new sandbox (sandbox.image). A sandbox made from another image or other settings is used as it is and said so (on_drift), unless --recreate." placeholder:"REF"`
	OCIRuntime  string   `name:"oci-runtime" help:"OCI runtime for a new sandbox (sandbox.oci_runtime; env HSBX_OCI_RUNTIME): runsc for gVisor, or any the engine has (docker's and podman's --runtime; podman takes a path too; on Kubernetes a RuntimeClass). hsbx doctor lists them. An existing sandbox under another runtime is refused, not used." placeholder:"NAME|PATH"`
	Network     string   `help:"Network for a new sandbox (sandbox.network; env HSBX_NETWORK): on (the engine's network), off (loopback only: nothing leaves), or allow (loopback only, plus hsbx's relay to what --egress-allow names, enforced on the host and logged: hsbx netlog)." placeholder:"on|off|allow"`
	EgressAllow []string `name:"egress-allow" help:"With --network allow: a destination the sandbox may reach (sandbox.egress_allow; env HSBX_EGRESS_ALLOW, a JSON list): a host name (*.example.com for any name under it), an address or a CIDR, with an optional :PORT. Repeat for more. Changing the list of an existing sandbox is drift (on_drift)." placeholder:"DEST"`
	Recreate    bool     `help:"Replace the sandbox with one made from the current settings, whether or not they changed (files in /workspace and /root are kept when persistent; sessions and the rest are not). Refused while a command runs in it."`
}

func (c *UpCmd) settingFlags() []config.Flag {
	return append(c.flags(), given(config.Flag{Key: "sandbox.image", Value: c.Image, Name: "--image"},
		config.Flag{Key: "sandbox.oci_runtime", Value: c.OCIRuntime, Name: "--oci-runtime"},
		config.Flag{Key: "sandbox.network", Value: c.Network, Name: "--network"},
		config.Flag{Key: "sandbox.egress_allow", Value: jsonList(c.EgressAllow), Name: "--egress-allow"})...)
}

// jsonList is a repeated flag's values as the JSON list a list setting
// reads ("" when none: not given).
func jsonList(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	b, _ := json.Marshal(vs)
	return string(b)
}

// Run implements the command. A running sandbox costs one engine call.
func (c *UpCmd) Run(ctx context.Context, app *App) error {
	if pa := app.Cfg.Sandbox.PersistAcrossProcesses; !pa.Value {
		return &exitError{code: ExitUsage, err: fmt.Errorf("`hsbx up` with persist_across_processes = false (%s) would make a sandbox that is removed as soon as hsbx exits; use `hsbx exec`, or turn persistence on", pa.Source)}
	}
	sb, err := app.sandbox(ctx)
	if err != nil {
		return err
	}
	ensure := sb.Ensure
	if c.Recreate {
		ensure = sb.Recreate
	}
	res, err := ensure(ctx)
	if err != nil {
		return err
	}
	if len(res.Drift) > 0 && !res.DriftWarned {
		app.warn(res.DriftWarning()) // up says it every time, exec once
	}
	if app.G.JSON {
		return json.NewEncoder(app.Env.Stdout).Encode(res)
	}
	_, err = fmt.Fprintln(app.Env.Stdout, res.ID)
	app.Log.Info("sandbox up", "action", res.Action, "name", res.Name)
	return err
}
