package sandbox

import (
	"errors"
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
