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
