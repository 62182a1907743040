package kubectl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// What the cluster says of itself: versions, the runtimes it offers, the
// context and namespace, the permissions hsbx needs; images are the
// nodes'.

// InspectImage implements runtime.Runtime: kubectl cannot see the images
// on the cluster's nodes; the kubelet pulls what is missing
// (imagePullPolicy IfNotPresent), so this is never ErrImageNotFound.
func (r *Runtime) InspectImage(_ context.Context, ref string) (runtime.Image, error) {
	return runtime.Image{}, fmt.Errorf("%w: kubectl cannot inspect image %s on the cluster's nodes", runtime.ErrUnsupported, ref)
}

// Pull implements runtime.Runtime: the kubelet pulls images, not kubectl.
func (r *Runtime) Pull(_ context.Context, ref string, _ io.Writer, _ time.Duration) error {
	return fmt.Errorf("%w: kubectl cannot pull image %s; the cluster's nodes pull it when a Pod needs it", runtime.ErrUnsupported, ref)
}

// Version implements runtime.Runtime: `kubectl version -o json`. When
// the cluster is unreachable the client version is still returned, with
// an error wrapping ErrUnreachable.
func (r *Runtime) Version(ctx context.Context) (runtime.Version, error) {
	res, err := r.call(ctx, []string{"version", "-o", "json"}, nil, r.timeout)
	var v struct {
		Client *struct {
			GitVersion string `json:"gitVersion"`
		} `json:"clientVersion"`
		Server *struct {
			GitVersion string `json:"gitVersion"`
			Platform   string `json:"platform"`
		} `json:"serverVersion"`
	}
	if jerr := json.Unmarshal(bytes.TrimSpace(res.Stdout), &v); jerr != nil || v.Client == nil {
		if err != nil {
			return runtime.Version{}, err
		}
		return runtime.Version{}, fmt.Errorf("%w: kubectl version printed %.200q", runtime.ErrBadOutput, res.Stdout)
	}
	out := runtime.Version{Client: strings.TrimPrefix(v.Client.GitVersion, "v")}
	if v.Server != nil {
		// The API server's platform stands for the nodes' (clusters of
		// one architecture are the rule; a Pod on another node's gets the
		// plain path when the agent cannot run there).
		out.Server, out.Platform = strings.TrimPrefix(v.Server.GitVersion, "v"), v.Server.Platform
	}
	if err == nil && out.Server == "" {
		err = &runtime.EngineError{Kind: runtime.ErrUnreachable, Argv: r.argv("version", "-o", "json"), Stderr: "no server version"}
	}
	return out, err
}

// Info implements runtime.Runtime: the server version (one call). The
// rest of Info describes a local engine and stays empty.
func (r *Runtime) Info(ctx context.Context) (runtime.Info, error) {
	v, err := r.Version(ctx)
	if err != nil {
		return runtime.Info{}, err
	}
	return runtime.Info{ServerVersion: v.Server}, nil
}

// OCIRuntimes implements runtime.Runtime: the cluster's RuntimeClasses
// (one call). A Pod that names none runs under its node's default.
func (r *Runtime) OCIRuntimes(ctx context.Context) (runtime.OCIRuntimes, error) {
	args := []string{"get", "runtimeclasses", "-o", "json"}
	res, err := r.call(ctx, args, nil, r.timeout)
	if err != nil {
		return runtime.OCIRuntimes{}, err
	}
	o, err := ParseRuntimeClasses(res.Stdout)
	if err != nil {
		return o, fmt.Errorf("%w: %v", runtime.ErrBadOutput, err)
	}
	return o, nil
}

// Where reports the context and namespace kubectl works in (one `config
// view --minify`): the configured ones, else the kubeconfig's current
// context and its namespace ("default" when it names none).
func (r *Runtime) Where(ctx context.Context) (kubeContext, namespace string, err error) {
	res, err := r.call(ctx, []string{"config", "view", "--minify", "-o", "json"}, nil, r.timeout)
	if err != nil {
		return "", "", err
	}
	var cfg struct {
		Current  string `json:"current-context"`
		Contexts []struct {
			Name    string `json:"name"`
			Context struct {
				Namespace string `json:"namespace"`
			} `json:"context"`
		} `json:"contexts"`
	}
	if err := json.Unmarshal(res.Stdout, &cfg); err != nil {
		return "", "", fmt.Errorf("%w: kubectl config view: %v", runtime.ErrBadOutput, err)
	}
	kubeContext, namespace = r.target.Context, r.target.Namespace
	if kubeContext == "" {
		kubeContext = cfg.Current
	}
	for _, c := range cfg.Contexts {
		if c.Name == kubeContext && namespace == "" {
			namespace = c.Context.Namespace
		}
	}
	if namespace == "" {
		namespace = "default"
	}
	return kubeContext, namespace, nil
}

// Permissions are the verbs hsbx needs in its namespace, as `kubectl auth
// can-i` words them.
var Permissions = [][]string{
	{"create", "pods"}, {"get", "pods"}, {"delete", "pods"}, {"create", "pods", "--subresource=exec"},
}

// ClaimPermissions are the further verbs a persistent sandbox needs with
// kubernetes.storage_class set.
var ClaimPermissions = [][]string{
	{"create", "persistentvolumeclaims"}, {"get", "persistentvolumeclaims"}, {"delete", "persistentvolumeclaims"},
}

// CanI asks the cluster whether this user may do what args say (`kubectl
// auth can-i ARGS...`): "yes" exits 0, "no" exits 1.
func (r *Runtime) CanI(ctx context.Context, args ...string) (bool, error) {
	res, err := r.call(ctx, append([]string{"auth", "can-i"}, args...), nil, r.timeout)
	answer := strings.TrimSpace(string(res.Stdout))
	switch {
	case answer == "yes" && err == nil:
		return true, nil
	case strings.HasPrefix(answer, "no") && res.ExitCode == 1:
		return false, nil
	case err != nil:
		return false, err
	}
	return false, fmt.Errorf("%w: kubectl auth can-i printed %.100q", runtime.ErrBadOutput, answer)
}
