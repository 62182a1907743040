package sandbox

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/internal/egress"
	"github.com/hsbx/hsbx/runtime"
)

// network = allow's run: no network interface, the proxy variables in
// the engine client's environment (never on argv), the policy in a
// label, and a hermes-egress posture that is neither "off" nor Hermes's.
func TestBuildRunAllow(t *testing.T) {
	s := DefaultSpec()
	s.Network, s.Egress = false, &Egress{Allow: []string{"*.pypi.org:443", "10.0.0.0/8"}}
	rs, _, err := buildRun(Key{Profile: "p", Task: "t"}, "n", s, engineHost{}, mountPaths{Workspace: "/w", Home: "/h"}, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(rs.Args, " ")
	if !strings.Contains(args, "--network none") || strings.Contains(args, "3128") {
		t.Fatalf("args %s", args)
	}
	for _, k := range []string{"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"} {
		if rs.Env[k] != "http://127.0.0.1:3128" {
			t.Errorf("%s = %q", k, rs.Env[k])
		}
	}
	if rs.Env["NO_PROXY"] != "localhost,127.0.0.1,::1" || rs.Env["no_proxy"] != rs.Env["NO_PROXY"] {
		t.Errorf("NO_PROXY %q no_proxy %q", rs.Env["NO_PROXY"], rs.Env["no_proxy"])
	}
	p, err := egress.ParsePosture(rs.Labels[egress.Label])
	if err != nil || p.Addr != "127.0.0.1:3128" || strings.Join(p.Allow, ",") != "*.pypi.org:443,10.0.0.0/8" {
		t.Fatalf("label %q: %+v %v", rs.Labels[egress.Label], p, err)
	}
	posture := rs.Labels[LabelEgress]
	if !strings.HasPrefix(posture, "hsbx-allow-") || posture == EgressOff {
		t.Fatalf("hermes-egress %q", posture)
	}
	// Another list is another posture; the same list is the same.
	s2 := s
	s2.Egress = &Egress{Allow: []string{"*.pypi.org:443"}}
	rs2, _, _ := buildRun(Key{Profile: "p", Task: "t"}, "n", s2, engineHost{}, mountPaths{Workspace: "/w", Home: "/h"}, func(string) (string, bool) { return "", false })
	if rs2.Labels[LabelEgress] == posture {
		t.Fatal("two lists, one posture")
	}
	// A Hermes-made sandbox is adopted only with the posture "off".
	c := runtime.Container{Name: "hermes-0123abcd", Labels: map[string]string{LabelAgent: "1", LabelTask: "t", LabelProfile: "p", LabelEgress: posture}}
	if err := (Key{Profile: "p", Task: "t"}).Adoptable(c); err == nil || errors.Is(err, ErrNotHermes) {
		t.Fatalf("a Hermes sandbox with posture %q: %v", posture, err)
	}
}

func TestSpecRefusesAllowWithANetwork(t *testing.T) {
	for _, c := range []struct {
		s       func(*Spec)
		setting string
	}{
		{func(s *Spec) { s.Network, s.Egress = true, &Egress{} }, "network"},
		{func(s *Spec) { s.Network, s.Egress = false, &Egress{Allow: []string{"a..b"}} }, "egress_allow"},
		{func(s *Spec) { s.Network, s.Egress = false, &Egress{Allow: []string{"x.com:0"}} }, "egress_allow"},
		{func(s *Spec) { s.Network, s.Egress = false, &Egress{Addr: "0.0.0.0:3128"} }, "egress_allow"},
	} {
		s := DefaultSpec()
		c.s(&s)
		var se *SpecError
		if err := s.Validate(); !errors.As(err, &se) || se.Setting != c.setting {
			t.Errorf("%+v: %v, want a SpecError for %s", s.Egress, err, c.setting)
		}
	}
}

// A warm command skips verifying only a sandbox of the posture asked for.
func TestMarkedPosture(t *testing.T) {
	on, off, allow := DefaultSpec(), DefaultSpec(), DefaultSpec()
	off.Network = false
	allow.Network, allow.Egress = false, &Egress{}
	for _, c := range []struct {
		spec    Spec
		network string
		ok      bool
	}{
		{on, "any", true}, {on, "none", true}, {on, "allow", true},
		{off, "none", true}, {off, "any", false}, {off, "allow", false},
		{allow, "allow", true}, {allow, "none", false}, {allow, "any", false},
	} {
		if got := markedPosture(c.spec, c.network); got != c.ok {
			t.Errorf("network %v egress %v, marker %q: %v", c.spec.Network, c.spec.Egress != nil, c.network, got)
		}
	}
}

// Brokered secrets' run: a placeholder under each name (new for each
// sandbox, never the value) in the environment and the label, the CA
// variables (a NODE_OPTIONS of the sandbox's own kept), and a
// hermes-egress posture of a broker: neither Hermes's "off", nor its
// proxy's digest, nor the same list's without secrets.
func TestBuildRunSecrets(t *testing.T) {
	s := DefaultSpec()
	s.Env = map[string]string{"NODE_OPTIONS": "--max-old-space-size=512"}
	s.Network, s.Egress = false, &Egress{Allow: []string{"pypi.org"}, Secrets: []Secret{
		{Name: "OPENAI_API_KEY", Hosts: []string{"api.openai.com"}, Env: "OPENAI_API_KEY"},
		{Name: "GH_TOKEN", Hosts: []string{"api.github.com", "*.githubusercontent.com"}, Header: "Authorization: token {}", File: "/run/secrets/gh"},
	}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	build := func(s Spec) runtime.RunSpec {
		rs, _, err := buildRun(Key{Profile: "p", Task: "t"}, "n", s, engineHost{}, mountPaths{Workspace: "/w", Home: "/h"}, func(string) (string, bool) { return "real", true })
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	rs := build(s)
	recs, err := egress.ParseSecrets(rs.Labels[egress.SecretsLabel])
	if err != nil || len(recs) != 2 {
		t.Fatalf("label %q: %v", rs.Labels[egress.SecretsLabel], err)
	}
	for _, r := range recs {
		if rs.Env[r.Name] != r.Placeholder || !strings.HasPrefix(r.Placeholder, egress.PlaceholderPrefix) {
			t.Errorf("%s = %q, label placeholder %q", r.Name, rs.Env[r.Name], r.Placeholder)
		}
	}
	for k, v := range map[string]string{"SSL_CERT_FILE": trustBundle, "REQUESTS_CA_BUNDLE": trustBundle, "CURL_CA_BUNDLE": trustBundle,
		"NODE_EXTRA_CA_CERTS": trustCA, "NODE_OPTIONS": "--max-old-space-size=512 --use-openssl-ca"} {
		if rs.Env[k] != v {
			t.Errorf("%s = %q, want %q", k, rs.Env[k], v)
		}
	}
	for k, v := range rs.Env {
		if strings.Contains(v, "real") || strings.Contains(k, "real") {
			t.Errorf("a value in the environment: %s=%s", k, v)
		}
	}
	posture := rs.Labels[LabelEgress]
	if !strings.HasPrefix(posture, "hsbx-broker-") {
		t.Fatalf("hermes-egress %q", posture)
	}
	if again := build(s); again.Env["OPENAI_API_KEY"] == rs.Env["OPENAI_API_KEY"] || again.Labels[LabelEgress] != posture {
		t.Error("a second sandbox got the same placeholder, or another posture for the same secrets")
	}
	plain := s
	plain.Egress = &Egress{Allow: s.Egress.Allow}
	if build(plain).Labels[LabelEgress] == posture {
		t.Error("the same list with and without secrets: one posture")
	}
	c := runtime.Container{Name: "hermes-0123abcd", Labels: map[string]string{LabelAgent: "1", LabelTask: "t", LabelProfile: "p", LabelEgress: posture}}
	if err := (Key{Profile: "p", Task: "t"}).Adoptable(c); err == nil {
		t.Fatalf("a Hermes sandbox with posture %q was adoptable", posture)
	}
	// Drift: the secrets' names, hosts and header; not where a value is.
	moved := s
	moved.Egress = &Egress{Allow: s.Egress.Allow, Secrets: append([]Secret(nil), s.Egress.Secrets...)}
	moved.Egress.Secrets[0].Env, moved.Egress.Secrets[0].File = "", "/elsewhere"
	if got := driftBetween(s.labelValue(1, 1), moved.labelValue(1, 1)); got != nil {
		t.Errorf("moving a value's source is drift: %v", got)
	}
	for what, f := range map[string]func(*Secret){
		"another host":   func(x *Secret) { x.Hosts = []string{"evil.example"} },
		"another header": func(x *Secret) { x.Header = "X-Key: {}" },
		"another place":  func(x *Secret) { x.In = []string{"query"} },
		"another name":   func(x *Secret) { x.Name = "OTHER" },
	} {
		changed := moved
		changed.Egress = &Egress{Allow: s.Egress.Allow, Secrets: append([]Secret(nil), s.Egress.Secrets...)}
		f(&changed.Egress.Secrets[0])
		if got := driftBetween(s.labelValue(1, 1), changed.labelValue(1, 1)); !slices.Equal(got, []string{"secrets"}) {
			t.Errorf("%s for a secret: drift %v, want [secrets]", what, got)
		}
	}
}

func TestSpecRefusesBadSecrets(t *testing.T) {
	for name, sec := range map[string]Secret{
		"no source":        {Name: "A", Hosts: []string{"a.example"}},
		"two sources":      {Name: "A", Hosts: []string{"a.example"}, Env: "A", File: "/a"},
		"no hosts":         {Name: "A", Env: "A"},
		"a range":          {Name: "A", Hosts: []string{"10.0.0.0/8"}, Env: "A"},
		"a bad name":       {Name: "A-B", Hosts: []string{"a.example"}, Env: "A"},
		"a proxy variable": {Name: "HTTPS_PROXY", Hosts: []string{"a.example"}, Env: "A"},
		"a CA variable":    {Name: "SSL_CERT_FILE", Hosts: []string{"a.example"}, Env: "A"},
		"PATH":             {Name: "PATH", Hosts: []string{"a.example"}, Env: "A"},
		"HOME":             {Name: "HOME", Hosts: []string{"a.example"}, Env: "A"},
		"a loader one":     {Name: "LD_PRELOAD", Hosts: []string{"a.example"}, Env: "A"},
		"hsbx's own":       {Name: "HSBX_TASK", Hosts: []string{"a.example"}, Env: "A"},
		"a bad place":      {Name: "A", Hosts: []string{"a.example"}, Env: "A", In: []string{"body"}},
	} {
		s := DefaultSpec()
		s.Network, s.Egress = false, &Egress{Secrets: []Secret{sec}}
		var se *SpecError
		if err := s.Validate(); !errors.As(err, &se) || se.Setting != "secrets" {
			t.Errorf("%s: %v, want a secrets SpecError", name, err)
		}
	}
	s := DefaultSpec()
	s.Network, s.Egress = false, &Egress{Secrets: []Secret{{Name: "A", Hosts: []string{"a.example"}, Env: "A"}, {Name: "A", Hosts: []string{"b.example"}, Env: "B"}}}
	if err := s.Validate(); err == nil {
		t.Error("one name twice: no error")
	}
	// Nothing else carries a value in or takes a placeholder's place.
	for setting, f := range map[string]func(*Spec){
		"env":         func(s *Spec) { s.Env = map[string]string{"API_KEY": "x"} },
		"forward_env": func(s *Spec) { s.ForwardEnv = []string{"HOST_KEY"} }, // the secret's source
	} {
		s := DefaultSpec()
		s.Network, s.Egress = false, &Egress{Secrets: []Secret{{Name: "API_KEY", Hosts: []string{"a.example"}, Env: "HOST_KEY"}}}
		f(&s)
		var se *SpecError
		if err := s.Validate(); !errors.As(err, &se) || se.Setting != setting {
			t.Errorf("%s: %v, want a %s SpecError", setting, err, setting)
		}
	}
	s.Egress, s.ForwardEnv = &Egress{Secrets: []Secret{{Name: "API_KEY", Hosts: []string{"a.example"}, Env: "HOST_KEY"}}}, []string{"API_KEY"}
	if err := s.Validate(); err == nil {
		t.Error("forward_env naming the secret: no error")
	}
}
