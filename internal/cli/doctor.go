package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/internal/environ"
	"github.com/hsbx/hsbx/internal/sshshare"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/runtime/kubectl"
	"github.com/hsbx/hsbx/sandbox"
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
	// OCIRuntimes are the runtimes a sandbox may ask for (oci_runtime):
	// docker's and a cluster's RuntimeClasses all, podman its default
	// (complete false: it also takes a path or a containers.conf name).
	OCIRuntimes *runtime.OCIRuntimes `json:"oci_runtimes,omitempty"`
	// Kubernetes is the kubectl runtime's context, namespace and
	// permissions there.
	Kubernetes *kubeReport `json:"kubernetes,omitempty"`
	// Location is where docker's or podman's engine runs, from what the
	// client reads (docs/remote.md); Storage is where a persistent
	// sandbox's /workspace and /root live there (the storage setting,
	// resolved).
	Location *runtime.Location `json:"location,omitempty"`
	Storage  string            `json:"storage,omitempty"`
	// SSHShare says whether docker's calls to an engine over ssh share
	// one connection (ssh_share), and where its socket is.
	SSHShare string `json:"ssh_share,omitempty"`
}

type kubeReport struct {
	Context      string          `json:"context"`
	Namespace    string          `json:"namespace"`
	StorageClass string          `json:"storage_class,omitempty"`
	Permissions  map[string]bool `json:"permissions"`
	checked      [][]string      // Permissions' keys, in the order asked
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
		rt := detect.New(found, o)
		if l, ok := rt.(runtime.Locator); ok {
			loc := l.Location()
			loc.Shared = append(loc.Shared, app.Cfg.SharedPaths.Value...)
			r.Location = &loc
			r.Storage = sandbox.StorageAt(app.Cfg.Sandbox.Storage.Value, loc, app.stateDir())
			if found.Dialect == runtime.Docker && sshshare.Applies(loc.Address) {
				r.SSHShare = sshShareText(o.Engine.Env, app.Cfg.SSHShare.Value)
			}
		}
		info, err = rt.Info(ctx)
		if err == nil {
			r.Reachable, r.Rootless, r.Version = true, info.Rootless, info.ServerVersion
		}
		if k, ok := rt.(*kubectl.Runtime); ok && err == nil {
			r.Kubernetes, err = kubeDoctor(ctx, k, app.Cfg.Kubernetes.StorageClass.Value)
			if err == nil {
				info.OCIRuntimes, err = rt.OCIRuntimes(ctx)
			}
		}
		if err == nil {
			r.OCIRuntimes = &info.OCIRuntimes
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
				fmt.Fprintf(w, "%-10s %s\n", k+":", safe(v))
			}
		}
		show("runtime", string(r.Runtime))
		if r.Binary != "" {
			show("client", fmt.Sprintf("%s %s (%s)", r.Binary, r.Client, r.Source))
		}
		if r.Reachable {
			show("engine", r.Version)
		}
		if l := r.Location; l != nil {
			show("engine at", l.String())
			show("storage", storageText(r.Storage, app.Cfg.Sandbox.Storage))
			show("ssh share", r.SSHShare)
		}
		if r.Reachable {
			show("rootless", fmt.Sprint(r.Rootless))
			show("reachable", "yes")
		} else {
			show("reachable", "no")
		}
		show("exec channel", r.Channel)
		if o := r.OCIRuntimes; o != nil {
			show("oci runtimes", ociRuntimesText(*o))
		}
		if k := r.Kubernetes; k != nil {
			show("context", k.Context)
			show("namespace", k.Namespace)
			if k.StorageClass != "" {
				show("storage class", k.StorageClass)
			}
			for _, p := range k.checked {
				verdict := "no"
				if k.Permissions[strings.Join(p, " ")] {
					verdict = "yes"
				}
				show("can "+strings.Join(p, " "), verdict)
			}
		}
	}
	for _, w := range config.Warnings(app.lookupEnv) {
		app.warn(w) // under --json a JSON line on stderr
	}
	if err != nil { // under --json an error object on stderr too, as for every command
		return &exitError{code: ExitEngine, err: fmt.Errorf("no usable container engine: %w", err)}
	}
	return nil
}

// kubeDoctor reports where the kubectl runtime works and whether it may
// make, reach and remove Pods there (and, with a storage class, claims);
// missing permissions are the error.
func kubeDoctor(ctx context.Context, k *kubectl.Runtime, class string) (*kubeReport, error) {
	kc, ns, err := k.Where(ctx)
	if err != nil {
		return nil, err
	}
	r := &kubeReport{Context: kc, Namespace: ns, StorageClass: class, Permissions: map[string]bool{}}
	r.checked = kubectl.Permissions
	if class != "" {
		r.checked = append(slices.Clone(r.checked), kubectl.ClaimPermissions...)
	}
	var missing []string
	for _, p := range r.checked {
		ok, err := k.CanI(ctx, p...)
		if err != nil {
			return r, err
		}
		r.Permissions[strings.Join(p, " ")] = ok
		if !ok {
			missing = append(missing, strings.Join(p, " "))
		}
	}
	if len(missing) > 0 {
		return r, fmt.Errorf("%w: in namespace %s (context %s) this user may not %s; ask the cluster's administrator for a Role that allows it, or choose another namespace (--kube-namespace)",
			runtime.ErrEngine, ns, kc, strings.Join(missing, ", "))
	}
	return r, nil
}

// ociRuntimesText is doctor's line of the runtimes a sandbox may ask for.
func ociRuntimesText(o runtime.OCIRuntimes) string {
	var parts []string
	for _, n := range o.Names {
		if n == o.Default {
			n += " (default)"
		}
		parts = append(parts, n)
	}
	if len(parts) == 0 {
		parts = append(parts, "none named: the default only")
	}
	text := strings.Join(parts, ", ")
	if !o.Complete {
		text += "; and any runtime by path, or named in containers.conf"
	}
	return text
}

// storageText says where persistent files live and which setting says so.
func storageText(resolved string, set config.Setting[string]) string {
	what := "host directories under the state dir, bound into the sandbox"
	if resolved == sandbox.StorageVolume {
		what = "the engine's named volumes, labelled with the key"
	}
	if set.Value == sandbox.StorageAuto {
		return fmt.Sprintf("%s: %s (storage = auto, %s: bind on this machine's engine, volume on a remote one)", resolved, what, set.Source)
	}
	return fmt.Sprintf("%s: %s (storage = %s, %s)", resolved, what, set.Value, set.Source)
}

// sshShareText says whether the engine client's environment has the ssh
// stand-in (internal/sshshare), and for how long its connection stays.
func sshShareText(env []string, keep time.Duration) string {
	if dir, ok := environ.Lookup(env, sshshare.EnvControl); ok {
		return fmt.Sprintf("one ssh connection for docker's calls, kept %s after its last use (ssh_share; socket in %s)", keep, dir)
	}
	if keep <= 0 {
		return "off: an ssh connection per call (ssh_share = 0)"
	}
	return "off: an ssh connection per call (the stand-in could not be set up: --log-level info says why)"
}
