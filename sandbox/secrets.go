package sandbox

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/internal/keystate"
	"github.com/hsbx/hsbx/runtime"
)

// Secret is a value the sandbox's processes use without ever holding it
// (network = allow: it rides the relay). The sandbox sees a placeholder
// under Name, new for each sandbox; a request through the relay to one of
// Hosts gets the value in the placeholder's place (HTTPS only: the relay
// terminates the sandbox's TLS for those hosts with a certificate of the
// sandbox's own CA, which the sandbox trusts), and the placeholder sent
// anywhere else is refused and logged. docs/secrets.md.
type Secret struct {
	// Name is the environment variable the sandbox sees the placeholder
	// under (OPENAI_API_KEY, ...).
	Name string
	// Hosts may receive the value: host names (a "*." wildcard for any
	// name under one) or addresses, each with an optional :PORT. They are
	// reachable whatever the allow-list says.
	Hosts []string
	// Header, when set ("Authorization: Bearer {}"), is set on every
	// request to Hosts with the value in place of {}; the value also
	// replaces the placeholder in any header's value.
	Header string
	// In names the places beyond header values where the value replaces
	// the placeholder: "path", "query", "cookie" (egress.Places). A
	// placeholder anywhere else in a request to Hosts is refused.
	In []string
	// Where the value is on the host, read when a request needs it (a new
	// value applies to the next request): exactly one of the environment
	// variable Env, the file File, or Value (the Go package only: the hsbx
	// command's relay is another process).
	Env   string
	File  string
	Value func() (string, error)
}

// The sandbox's CA certificate and the bundle with it, where the CA
// variables point (written by the agent when the sandbox is made).
const (
	trustDir    = "/etc/hsbx"
	trustCA     = trustDir + "/ca.pem"
	trustBundle = trustDir + "/ca-bundle.pem"
)

// caVars are the variables common clients read their CA bundle from.
var caVars = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "NODE_OPTIONS"}

// steers says whether name is a variable that steers the sandbox's
// processes or its relay: a placeholder in its place would break them,
// and a secret there would be a way to replace them.
func steers(name string) bool {
	up := strings.ToUpper(name)
	switch up {
	case "PATH", "HOME", "SHELL", "USER", "PWD", "TMPDIR", "IFS", "ENV", "BASH_ENV":
		return true
	}
	return slices.Contains(caVars, name) || strings.HasSuffix(up, "_PROXY") || strings.HasPrefix(up, "LD_") || strings.HasPrefix(up, "HSBX_")
}

// checkSecretsAgainstEnv refuses a sandbox whose other variables would
// carry a secret's value in or take its placeholder's place: a forwarded
// variable that is a secret's source (its value would be in the
// sandbox's environment and the engine's record), or a secret's name in
// env or forward_env.
func (s Spec) checkSecretsAgainstEnv() error {
	for _, sec := range s.Egress.Secrets {
		if _, ok := s.Env[sec.Name]; ok {
			return &SpecError{"env", fmt.Sprintf("%s is a brokered secret's name (the sandbox sees its placeholder there); remove it from env", sec.Name)}
		}
		for _, f := range s.ForwardEnv {
			if f == sec.Name || (sec.Env != "" && f == sec.Env) {
				return &SpecError{"forward_env", fmt.Sprintf("%s would carry secret %s's value into the sandbox; remove it from forward_env (the sandbox sees the placeholder under %s)", f, sec.Name, sec.Name)}
			}
		}
	}
	return nil
}

func (e *Egress) checkSecrets() error {
	seen := map[string]bool{}
	for _, s := range e.Secrets {
		if err := egress.CheckSecret(egress.Secret{Name: s.Name, Hosts: s.Hosts, Header: s.Header, In: s.In}); err != nil {
			return &SpecError{"secrets", err.Error()}
		}
		n := 0
		for _, set := range []bool{s.Env != "", s.File != "", s.Value != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return &SpecError{"secrets", fmt.Sprintf("secret %s: give exactly one of env, file (or Value in Go) for where its value is on the host", s.Name)}
		}
		if seen[s.Name] || steers(s.Name) {
			return &SpecError{"secrets", fmt.Sprintf("secret %s: the name is taken (twice, or a variable that steers the sandbox or the relay: PATH, HOME, SHELL, TMPDIR, LD_*, HSBX_*, the proxy and CA variables)", s.Name)}
		}
		seen[s.Name] = true
	}
	return nil
}

// secretRecords are the label's record of e's secrets with placeholders
// (new ones when ph has none for a name).
func (e *Egress) secretRecords(ph map[string]string) []egress.Secret {
	var out []egress.Secret
	for _, s := range e.Secrets {
		p := ph[s.Name]
		if p == "" {
			p = egress.NewPlaceholder()
		}
		out = append(out, egress.Secret{Name: s.Name, Hosts: s.Hosts, Header: s.Header, In: s.In, Placeholder: p})
	}
	return out
}

// secretHosts are every secret's hosts (the CA's name constraints).
func (e *Egress) secretHosts() []string {
	var out []string
	for _, s := range e.Secrets {
		out = append(out, s.Hosts...)
	}
	return out
}

// secretsSetting is the secrets as drift compares them: names, hosts and
// how each is sent (where a value is on the host is the host's business).
func (e *Egress) secretsSetting() string {
	var parts []string
	for _, s := range e.Secrets {
		hosts := slices.Clone(s.Hosts)
		slices.Sort(hosts)
		in := slices.Clone(s.In)
		slices.Sort(in)
		parts = append(parts, s.Name+"="+strings.Join(hosts, ",")+";"+s.Header+";"+strings.Join(in, ","))
	}
	slices.Sort(parts)
	return strings.Join(parts, "\x00")
}

// trustEnv is the CA variables for a sandbox with secrets; a NODE_OPTIONS
// of the sandbox's own keeps its options, with --use-openssl-ca added.
func trustEnv(env map[string]string) {
	for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"} {
		env[k] = trustBundle
	}
	env["NODE_EXTRA_CA_CERTS"] = trustCA
	if cur := strings.TrimSpace(env["NODE_OPTIONS"]); cur != "" && !strings.Contains(cur, "--use-openssl-ca") {
		env["NODE_OPTIONS"] = cur + " --use-openssl-ca"
	} else if cur == "" {
		env["NODE_OPTIONS"] = "--use-openssl-ca"
	}
}

// sources are where this process finds the secrets' values: what a
// holder is told (a Value func cannot cross to it).
func (e *Egress) sources() []egress.Source {
	var out []egress.Source
	for _, s := range e.Secrets {
		if s.Env != "" || s.File != "" {
			out = append(out, egress.Source{Name: s.Name, Hosts: s.Hosts, Env: s.Env, File: s.File})
		}
	}
	return out
}

// declared are the hosts each secret may go to by this process's
// configuration: the relay sends a value to a host both the sandbox's
// label and this declare for it (a sandbox made from an older declaration
// and kept, on_drift = warn, never takes a value to a host dropped since).
func (e *Egress) declared() map[string][]string {
	out := map[string][]string{}
	for _, s := range e.Secrets {
		out[s.Name] = s.Hosts
	}
	return out
}

// values reads the secrets' values in this process.
func (s *Sandbox) secretValues() egress.Values {
	if s.spec.Egress == nil {
		return nil
	}
	fromSources := egress.SourceValues(s.spec.Egress.sources(), func(k string) string { v, _ := s.m.getenv(k); return v })
	return func(name string) (string, error) {
		for _, sec := range s.spec.Egress.Secrets {
			if sec.Name == name && sec.Value != nil {
				return sec.Value()
			}
		}
		return fromSources(name)
	}
}

// keyStateDir is the key's state directory on this host.
func (s *Sandbox) keyStateDir() string {
	if s.stateDir() == "" {
		return ""
	}
	return keystate.Dir(s.stateDir(), s.key.Hash())
}

// newSecretsCA makes and keeps the CA of a sandbox with secrets about to
// be made (its files named by the creation's nonce).
func (s *Sandbox) newSecretsCA(spec Spec, name, nonce string) (*egress.CA, error) {
	if spec.Egress == nil || len(spec.Egress.Secrets) == 0 {
		return nil, nil
	}
	if s.keyStateDir() == "" {
		return nil, &SpecError{"secrets", "brokered secrets need a state directory on the host (the sandbox's CA key is kept there)"}
	}
	ca, err := egress.NewCA(name, spec.Egress.secretHosts())
	if err != nil {
		return nil, fmt.Errorf("secrets: making the sandbox's CA: %w", err)
	}
	if err := egress.SaveCA(s.keyStateDir(), nonce, ca); err != nil {
		return nil, err
	}
	return ca, nil
}

// installTrust puts the sandbox's CA certificate where the CA variables
// point, through the agent (as root where the engine can say so); the
// sandbox is removed when that fails, never handed out half made.
func (s *Sandbox) installTrust(ctx context.Context, id string, ca *egress.CA) error {
	user := "0"
	if s.rt().Capabilities().Lacks[runtime.ExecUser] != "" {
		user = "" // an exec without a user of its own (a Pod's) runs as the sandbox's
	}
	err := channel.InstallTrust(ctx, s.agent(ctx, id, user), trustDir, ca.CertPEM())
	if err == nil {
		return nil
	}
	err = fmt.Errorf("secrets: putting the sandbox's CA certificate in %s failed (it was not kept): %w", trustDir, err)
	if rerr := s.rt().Remove(context.WithoutCancel(ctx), true, id); rerr != nil {
		err = fmt.Errorf("%w (and removing it failed: %v)", err, rerr)
	}
	return err
}

// dropCA removes the CA files of a creation that made nothing.
func (s *Sandbox) dropCA(nonce string) {
	if d := s.keyStateDir(); d != "" {
		for _, ext := range []string{".pem", ".key"} {
			_ = os.Remove(d + "/egress-ca-" + nonce + ext)
		}
	}
}
