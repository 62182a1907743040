package egress

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
)

// Label is the container label that records a sandbox's allow-list and
// the loopback address its relay listens on, set when the sandbox is made:
// the holder that relays for it reads the policy there (the engine's
// record, the same for every process on every host), never from whoever
// started it.
const Label = "hsbx.egress"

// TaskLabel is the label holding the sandbox's task as the user gave it
// (sandbox.LabelRawTask), named in each network log record.
const TaskLabel = "hsbx.task"

// DefaultAddr is where the relay listens inside the sandbox, the address
// the proxy variables name.
const DefaultAddr = "127.0.0.1:3128"

// Posture is what Label holds.
type Posture struct {
	Addr  string   `json:"addr"`
	Allow []string `json:"allow"`
}

// Encode is the label's value.
func (p Posture) Encode() string {
	allow := p.Allow
	if allow == nil {
		allow = []string{}
	}
	b, _ := json.Marshal(Posture{Addr: p.Addr, Allow: allow})
	return string(b)
}

// ParsePosture reads Label's value.
func ParsePosture(v string) (Posture, error) {
	var p Posture
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return p, fmt.Errorf("label %s: %w", Label, err)
	}
	host, _, err := net.SplitHostPort(p.Addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return p, fmt.Errorf("label %s: %q is not a loopback address", Label, p.Addr)
	}
	if _, err := ParseRules(p.Allow); err != nil {
		return p, fmt.Errorf("label %s: %w", Label, err)
	}
	return p, nil
}

// ProxyEnv is what a process in the sandbox is given so that unmodified
// clients use the relay: both casings of each proxy variable, and
// loopback left alone.
func ProxyEnv(addr string) []string {
	u := "http://" + addr
	noProxy := "localhost,127.0.0.1,::1"
	var env []string
	for _, k := range []string{"http_proxy", "https_proxy", "all_proxy"} {
		env = append(env, k+"="+u, strings.ToUpper(k)+"="+u)
	}
	return append(env, "no_proxy="+noProxy, "NO_PROXY="+noProxy)
}
