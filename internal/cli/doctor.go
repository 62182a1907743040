package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/detect"
)

// DoctorCmd reports the engine hsbx would drive and whether it works.
type DoctorCmd struct{}

type doctorReport struct {
	Runtime   runtime.Dialect `json:"runtime"`
	Binary    string          `json:"binary"`
	Source    string          `json:"source"`
	Version   string          `json:"version"` // the engine's (server) version; the client's until the engine answers
	Client    string          `json:"client_version"`
	Rootless  bool            `json:"rootless"`
	Reachable bool            `json:"reachable"`
	Error     string          `json:"error,omitempty"`
	Hint      string          `json:"hint,omitempty"`
	// Channel is the exec channel here: "on (agent PATH)", "off (...)" or
	// "unavailable: why" (commands then take the plain exec path).
	Channel string `json:"exec_channel"`
}

// Run implements the command: detection (always asking the binary, never
// the cache), then one `info` call. Exit 125 when no engine is usable.
func (c *DoctorCmd) Run(ctx context.Context, app *App) error {
	o := app.detectOptions()
	o.Fresh = true
	found, err := detect.Find(ctx, o)
	r := doctorReport{Runtime: found.Dialect, Binary: found.Path, Source: found.Source}
	r.Client = found.ClientVersion
	if err == nil {
		var info runtime.Info
		info, err = detect.New(found, o.Engine).Info(ctx)
		if err == nil {
			r.Reachable, r.Rootless, r.Version = true, info.Rootless, info.ServerVersion
		}
	}
	if err != nil {
		r.Error, r.Hint = err.Error(), runtime.Hint(err)
	}
	r.Channel = app.channelVerdict()
	if app.G.JSON {
		if jerr := json.NewEncoder(app.Env.Stdout).Encode(r); jerr != nil {
			return jerr
		}
	} else {
		w := app.Env.Stdout
		show := func(k, v string) {
			if v != "" {
				fmt.Fprintf(w, "%-10s %s\n", k+":", v)
			}
		}
		show("runtime", string(r.Runtime))
		if r.Binary != "" {
			show("client", fmt.Sprintf("%s %s (%s)", r.Binary, r.Client, r.Source))
		}
		if r.Reachable {
			show("engine", r.Version)
		}
		if r.Reachable {
			show("rootless", fmt.Sprint(r.Rootless))
			show("reachable", "yes")
		} else {
			show("reachable", "no")
		}
		show("exec channel", r.Channel)
	}
	if !app.G.JSON {
		for _, w := range config.Warnings(app.lookupEnv) {
			fmt.Fprintf(app.Env.Stderr, "hsbx: warning: %s\n", w)
		}
	}
	if err != nil {
		if app.G.JSON {
			return &exitError{code: ExitEngine}
		}
		return &exitError{code: ExitEngine, err: fmt.Errorf("no usable container engine: %w", err)}
	}
	return nil
}
