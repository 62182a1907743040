package config

import (
	"strings"
	"testing"
)

// The network setting's three values, Hermes's booleans, and the
// allow-list beside it.
func TestNetworkSetting(t *testing.T) {
	for _, c := range []struct {
		name  string
		file  string
		env   map[string]string
		flags []Flag
		want  string
		allow []string
		err   string
	}{
		{name: "default", want: "on"},
		{name: "hermes false", env: map[string]string{"TERMINAL_DOCKER_NETWORK": "false"}, want: "off"},
		{name: "hermes 1", env: map[string]string{"TERMINAL_DOCKER_NETWORK": "1"}, want: "on"},
		{name: "toml bool", file: "[sandbox]\nnetwork = false\n", want: "off"},
		{name: "toml allow", file: "[sandbox]\nnetwork = \"allow\"\negress_allow = [\"*.pypi.org:443\", \"10.0.0.0/8\"]\n", want: "allow", allow: []string{"*.pypi.org:443", "10.0.0.0/8"}},
		{name: "env allow", env: map[string]string{"HSBX_NETWORK": "Allow", "HSBX_EGRESS_ALLOW": `["example.com"]`}, want: "allow", allow: []string{"example.com"}},
		{name: "flag over env", env: map[string]string{"HSBX_NETWORK": "on"}, flags: []Flag{{Key: "sandbox.network", Value: "allow", Name: "--network"}}, want: "allow", allow: []string{}},
		{name: "allow, empty list", file: "[sandbox]\nnetwork = \"allow\"\n", want: "allow", allow: []string{}},
		{name: "bad value", env: map[string]string{"HSBX_NETWORK": "partly"}, err: "want on, off or allow"},
		{name: "toml number", file: "[sandbox]\nnetwork = 1\n", err: "want on, off or allow"},
		{name: "list without allow", file: "[sandbox]\negress_allow = [\"example.com\"]\n", err: "network is on"},
		{name: "bad entry", file: "[sandbox]\nnetwork = \"allow\"\negress_allow = [\"*\"]\n", err: "sandbox.egress_allow"},
		{name: "bad port", env: map[string]string{"HSBX_NETWORK": "allow", "HSBX_EGRESS_ALLOW": `["a.com:99999"]`}, err: "1-65535"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := load(t, c.file, c.env, c.flags...)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Sandbox.Network.Value; got != c.want {
				t.Fatalf("network %q, want %q", got, c.want)
			}
			s := cfg.Spec()
			switch c.want {
			case "on":
				if !s.Network || s.Egress != nil {
					t.Fatalf("spec %v %v", s.Network, s.Egress)
				}
			case "off":
				if s.Network || s.Egress != nil {
					t.Fatalf("spec %v %v", s.Network, s.Egress)
				}
			case "allow":
				if s.Network || s.Egress == nil || strings.Join(s.Egress.Allow, ",") != strings.Join(c.allow, ",") {
					t.Fatalf("spec %v %+v", s.Network, s.Egress)
				}
			}
		})
	}
}

// Brokered secrets: [[sandbox.secrets]] tables or HSBX_SECRETS (JSON),
// read strictly, only with network = allow.
func TestSecretsSetting(t *testing.T) {
	const toml = "[sandbox]\nnetwork = \"allow\"\n\n[[sandbox.secrets]]\nname = \"OPENAI_API_KEY\"\nhosts = [\"api.openai.com\"]\nenv = \"OPENAI_API_KEY\"\n\n" +
		"[[sandbox.secrets]]\nname = \"GH_TOKEN\"\nhosts = [\"api.github.com\"]\nheader = \"Authorization: token {}\"\nfile = \"/run/secrets/gh\"\n"
	for _, c := range []struct {
		name string
		file string
		env  map[string]string
		want []string // name=env|file
		err  string
	}{
		{name: "toml", file: toml, want: []string{"OPENAI_API_KEY=OPENAI_API_KEY|", "GH_TOKEN=|/run/secrets/gh"}},
		{name: "env", env: map[string]string{"HSBX_NETWORK": "allow", "HSBX_SECRETS": `[{"name":"K","hosts":["x.example"],"env":"K_SRC"}]`}, want: []string{"K=K_SRC|"}},
		{name: "without allow", env: map[string]string{"HSBX_SECRETS": `[{"name":"K","hosts":["x.example"],"env":"K"}]`}, err: "set network = allow"},
		{name: "a misspelt key", env: map[string]string{"HSBX_NETWORK": "allow", "HSBX_SECRETS": `[{"name":"K","host":["x.example"],"env":"K"}]`}, err: `unknown field "host"`},
		{name: "a misspelt key in toml", file: "[sandbox]\nnetwork = \"allow\"\n[[sandbox.secrets]]\nname = \"K\"\nhost = [\"x\"]\nenv = \"K\"\n", err: `unknown field "host"`},
		{name: "no source", env: map[string]string{"HSBX_NETWORK": "allow", "HSBX_SECRETS": `[{"name":"K","hosts":["x.example"]}]`}, err: "exactly one of env, file"},
		{name: "a relative file", env: map[string]string{"HSBX_NETWORK": "allow", "HSBX_SECRETS": `[{"name":"K","hosts":["x.example"],"file":"key.txt"}]`}, err: "want an absolute path"},
		{name: "a bad host", env: map[string]string{"HSBX_NETWORK": "allow", "HSBX_SECRETS": `[{"name":"K","hosts":["a..b"],"env":"K"}]`}, err: "sandbox.secrets"},
		{name: "not a list", env: map[string]string{"HSBX_NETWORK": "allow", "HSBX_SECRETS": `{"name":"K"}`}, err: "want a JSON array of secrets"},
		{name: "toml not tables", file: "[sandbox]\nnetwork = \"allow\"\nsecrets = [\"K\"]\n", err: "want [[sandbox.secrets]] tables"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := load(t, c.file, c.env)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := cfg.Spec()
			var got []string
			for _, sec := range s.Egress.Secrets {
				got = append(got, sec.Name+"="+sec.Env+"|"+sec.File)
			}
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Fatalf("secrets %q, want %q", got, c.want)
			}
		})
	}
}
