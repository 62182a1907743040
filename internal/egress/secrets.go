package egress

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// SecretsLabel is the container label that records a sandbox's brokered
// secrets: each one's name, the hosts it is for, how it is sent, and the
// placeholder the sandbox sees in its place — never a value. The relay
// reads it from the engine, as it reads Label.
const SecretsLabel = "hsbx.secrets"

// PlaceholderPrefix starts every placeholder: what the relay looks for in
// what a sandbox sends.
const PlaceholderPrefix = "hsbx-secret-"

// Secret is one brokered secret as the sandbox's label records it.
type Secret struct {
	// Name is the environment variable the sandbox sees the placeholder
	// under.
	Name string `json:"name"`
	// Hosts may receive the value: names (a "*." wildcard for any name
	// under one) or addresses, each with an optional :PORT.
	Hosts []string `json:"hosts"`
	// Header, when set ("Authorization: Bearer {}"), is set on every
	// request to Hosts with the value in place of {}; the value also
	// replaces the placeholder in a request's header values (never in a
	// cookie, the path or the query unless In names them).
	Header string `json:"header,omitempty"`
	// In names the places beyond header values the value may be put
	// when the placeholder is there: "path", "query", "cookie" (a server
	// that repeats them — a 404 page, a log, a redirect — sees the value
	// where a credential was not expected).
	In []string `json:"in,omitempty"`
	// Placeholder is what the sandbox sees in the value's place:
	// PlaceholderPrefix and 32 random hex digits, new for each sandbox.
	Placeholder string `json:"placeholder"`
}

// Places are where a value may go beyond header values, when a secret's
// In names them.
func Places() []string { return []string{"path", "query", "cookie"} }

var secretName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var placeholderRE = regexp.MustCompile(`^` + PlaceholderPrefix + `[0-9a-f]{32}$`)

// NewPlaceholder is a new random placeholder.
func NewPlaceholder() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return PlaceholderPrefix + hex.EncodeToString(b)
}

// CheckSecret checks a declaration (everything but the placeholder).
func CheckSecret(s Secret) error {
	if !secretName.MatchString(s.Name) {
		return fmt.Errorf("secret %q: a name is an environment variable's (letters, digits, _; not starting with a digit)", s.Name)
	}
	if len(s.Hosts) == 0 {
		return fmt.Errorf("secret %s: no hosts: name the hosts that may receive it", s.Name)
	}
	for _, h := range s.Hosts {
		r, err := ParseRule(h)
		if err != nil {
			return fmt.Errorf("secret %s: host %w", s.Name, err)
		}
		if !r.IsName() && r.Prefix.Bits() != r.Prefix.Addr().BitLen() {
			return fmt.Errorf("secret %s: host %q: a secret goes to a host name or one address, not a range", s.Name, h)
		}
	}
	for _, p := range s.In {
		if !slices.Contains(Places(), p) {
			return fmt.Errorf("secret %s: in %q: the places a value may go beyond headers are %s", s.Name, p, strings.Join(Places(), ", "))
		}
	}
	if s.Header != "" {
		name, tmpl, ok := strings.Cut(s.Header, ":")
		if !ok || !token(strings.TrimSpace(name)) || strings.Count(tmpl, "{}") != 1 || strings.ContainsAny(s.Header, "\r\n") {
			return fmt.Errorf("secret %s: header %q: want \"Name: text with {} where the value goes\"", s.Name, s.Header)
		}
	}
	return nil
}

// EncodeSecrets is SecretsLabel's value.
func EncodeSecrets(ss []Secret) string {
	b, _ := json.Marshal(ss)
	return string(b)
}

// ParseSecrets reads SecretsLabel's value.
func ParseSecrets(v string) ([]Secret, error) {
	var ss []Secret
	if err := json.Unmarshal([]byte(v), &ss); err != nil {
		return nil, fmt.Errorf("label %s: %w", SecretsLabel, err)
	}
	seen := map[string]bool{}
	for _, s := range ss {
		if err := CheckSecret(s); err != nil {
			return nil, fmt.Errorf("label %s: %w", SecretsLabel, err)
		}
		if !placeholderRE.MatchString(s.Placeholder) || seen[s.Name] || seen[s.Placeholder] {
			return nil, fmt.Errorf("label %s: secret %s: a bad or repeated placeholder or name", SecretsLabel, s.Name)
		}
		seen[s.Name], seen[s.Placeholder] = true, true
	}
	return ss, nil
}

// Values gives a secret's current value on the host, by name: read when
// a request needs it, so a new value applies to the next request.
type Values func(name string) (string, error)

// Broker puts brokered secrets' values into the requests that may carry
// them, and catches their placeholders on the way anywhere else.
type Broker struct {
	Secrets []Secret
	Values  Values
	// Declared, when set, are the hosts each secret may go to by the
	// configuration of the process that relays: a value goes to a host
	// that both it and the sandbox's label name (a secret it does not
	// name goes nowhere).
	Declared map[string][]string
	// CA signs the certificates the relay shows the sandbox for the
	// secrets' hosts (nil: those hosts are refused, never passed through
	// with the placeholder).
	CA *CA
}

// rules are the secret's hosts as rules.
func (s Secret) rules() []Rule {
	rs, _ := ParseRules(s.Hosts)
	return rs
}

// For returns the secrets whose hosts cover host and port.
func (b *Broker) For(host string, port int) []Secret {
	if b == nil {
		return nil
	}
	var out []Secret
	covered := func(rs []Rule) bool {
		return slices.ContainsFunc(rs, func(r Rule) bool { return r.covers(host, port) })
	}
	for _, s := range b.Secrets {
		if !covered(s.rules()) {
			continue
		}
		if b.Declared != nil {
			now, _ := ParseRules(b.Declared[s.Name])
			if !covered(now) {
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// DeclaredBy are the hosts sources declare for each secret (for
// Broker.Declared).
func DeclaredBy(sources []Source) map[string][]string {
	out := map[string][]string{}
	for _, s := range sources {
		out[s.Name] = s.Hosts
	}
	return out
}

// covers says whether r names host (a name or an address) and port.
func (r Rule) covers(host string, port int) bool {
	if !r.port(port) {
		return false
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return !r.IsName() && r.Prefix.Contains(a.Unmap())
	}
	n, err := normalName(host, false)
	return err == nil && r.IsName() && matchName(r.Name, n)
}

// HostRules are every secret's hosts, which the allow-list takes in: a
// secret's host may be reached.
func (b *Broker) HostRules() []string {
	var out []string
	for _, s := range b.Secrets {
		out = append(out, s.Hosts...)
	}
	return out
}

// placeholderIn finds a placeholder in p of a secret other than those in
// ok, returning the secret it stands for.
func (b *Broker) placeholderIn(p []byte, ok ...Secret) (Secret, bool) {
	if b == nil {
		return Secret{}, false
	}
	for i := 0; ; {
		j := bytes.Index(p[i:], []byte(PlaceholderPrefix))
		if j < 0 {
			return Secret{}, false
		}
		i += j
		for _, s := range b.Secrets {
			if bytes.HasPrefix(p[i:], []byte(s.Placeholder)) && !slices.ContainsFunc(ok, func(o Secret) bool { return o.Name == s.Name }) {
				return s, true
			}
		}
		i += len(PlaceholderPrefix)
	}
}

// exfiltrationError is a placeholder on its way where its secret may not go.
type exfiltrationError struct {
	secret string
	dest   string
}

func (e *exfiltrationError) Error() string {
	return fmt.Sprintf("the placeholder of secret %s was sent to %s, which may not receive it: refused as an exfiltration attempt", e.secret, e.dest)
}

// placementError is a placeholder where its secret's value may not go.
type placementError struct {
	secret, place string
}

func (e *placementError) Error() string {
	return fmt.Sprintf("the placeholder of secret %s is in the request's %s, where its value may not go: put it in a header, or list %q in the secret's `in`", e.secret, e.place, e.place)
}

// inject rewrites r, a request to dest whose secrets are ours (the
// secrets dest may receive): their placeholders in header values get the
// values (in the path, query and cookies only where a secret's In says
// so), Header templates are set; a placeholder of any other secret is an
// *exfiltrationError, one where its own may not go a *placementError. It
// returns the names injected.
func (b *Broker) inject(r *http.Request, ours []Secret, dest string) ([]string, error) {
	head := r.URL.String() + "\n"
	for k, vs := range r.Header {
		head += k + ": " + strings.Join(vs, ",") + "\n"
	}
	if sec, found := b.placeholderIn([]byte(head), ours...); found {
		return nil, &exfiltrationError{secret: sec.Name, dest: dest}
	}
	var used []string
	for _, s := range ours {
		value := ""
		get := func() (string, error) {
			if value != "" {
				return value, nil
			}
			v, err := b.Values(s.Name)
			if err != nil {
				return "", fmt.Errorf("secret %s has no value on the host: %w", s.Name, err)
			}
			if v == "" || strings.ContainsAny(v, "\r\n") {
				return "", fmt.Errorf("secret %s: its value on the host is empty or spans lines", s.Name)
			}
			value = v
			return v, nil
		}
		may := func(place string) error {
			if slices.Contains(s.In, place) {
				return nil
			}
			return &placementError{secret: s.Name, place: place}
		}
		hit := false
		for place, part := range map[string]*string{"query": &r.URL.RawQuery, "path": &r.URL.Path} {
			if !strings.Contains(*part, s.Placeholder) {
				continue
			}
			if err := may(place); err != nil {
				return nil, err
			}
			v, err := get()
			if err != nil {
				return nil, err
			}
			*part = strings.ReplaceAll(*part, s.Placeholder, v)
			r.URL.RawPath = ""
			hit = true
		}
		for k, vs := range r.Header {
			for i, hv := range vs {
				if !strings.Contains(hv, s.Placeholder) {
					continue
				}
				if http.CanonicalHeaderKey(k) == "Cookie" {
					if err := may("cookie"); err != nil {
						return nil, err
					}
				}
				v, err := get()
				if err != nil {
					return nil, err
				}
				r.Header[k][i] = strings.ReplaceAll(hv, s.Placeholder, v)
				hit = true
			}
		}
		if s.Header != "" {
			v, err := get()
			if err != nil {
				return nil, err
			}
			name, tmpl, _ := strings.Cut(s.Header, ":")
			r.Header.Set(strings.TrimSpace(name), strings.Replace(strings.TrimSpace(tmpl), "{}", v, 1))
			hit = true
		}
		if hit {
			used = append(used, s.Name)
		}
	}
	return used, nil
}

// hostError is a request on a brokered connection that names another
// host than the connection's.
type hostError struct{ named, dest string }

func (e *hostError) Error() string {
	return fmt.Sprintf("the request names host %q on a connection to %s: a secret's value goes only to the host the connection was made for", clip(e.named), e.dest)
}

// sameAuthority says whether named (a Host header: host, host:port,
// [v6]:port) names host and port, its port defaulting to defPort.
func sameAuthority(named, host string, port, defPort int) bool {
	h, p, err := net.SplitHostPort(named)
	if err != nil {
		h, p = strings.Trim(named, "[]"), strconv.Itoa(defPort)
	}
	same := strings.EqualFold(strings.TrimSuffix(h, "."), strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	return same && p == strconv.Itoa(port)
}

// checkHost makes sure r, read on a connection to host:port, names that
// host and port (Host, or an absolute target's authority; none: the
// connection's is set).
func checkHost(r *http.Request, host string, port int) error {
	dest := net.JoinHostPort(host, strconv.Itoa(port))
	named := r.Host
	if r.URL.Host != "" && r.URL.Host != named {
		return &hostError{named: r.URL.Host, dest: dest}
	}
	if named == "" {
		r.Host = dest
		if port == 443 {
			r.Host = host
			if strings.Contains(host, ":") {
				r.Host = "[" + host + "]"
			}
		}
		return nil
	}
	if !sameAuthority(named, host, port, 443) {
		return &hostError{named: named, dest: dest}
	}
	return nil
}

// scanner watches bytes on their way out for a placeholder: a write
// that would complete one is not passed on, and fails (and so does every
// later one). Nothing is held back (a protocol waiting for an answer
// never stalls on the scanner); the end of what went before is kept, so
// a placeholder split across writes is caught when its last part comes:
// what an earlier write carried of it has gone, the rest never goes.
type scanner struct {
	b    *Broker
	ok   []Secret // the secrets dest may receive: their placeholders pass
	dest string
	w    interface{ Write([]byte) (int, error) }
	sent []byte // the end of what went, as long as a placeholder less one
	err  error
}

func (s *scanner) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	buf := append(slices.Clone(s.sent), p...)
	if sec, found := s.b.placeholderIn(buf, s.ok...); found {
		s.err = &exfiltrationError{secret: sec.Name, dest: s.dest}
		return 0, s.err
	}
	n, err := s.w.Write(p)
	keep := len(PlaceholderPrefix) + 32 - 1
	if len(buf) > keep {
		buf = buf[len(buf)-keep:]
	}
	s.sent = append(s.sent[:0], buf...)
	return n, err
}

// flush is nothing to do (nothing is held back); it says whether a
// placeholder was caught.
func (s *scanner) flush() error { return s.err }

var errNoCA = errors.New("no certificate authority for this sandbox's secrets on this host")

// Source is where a brokered secret's value is on the host: an
// environment variable of the process that relays, or a file, read at
// each request (so a new value in the file applies to the next one).
type Source struct {
	Name string `json:"name"`
	// Hosts are the hosts the configuration that names this source
	// declares for the secret now (Broker.Declared).
	Hosts []string `json:"hosts,omitempty"`
	Env   string   `json:"env,omitempty"`
	File  string   `json:"file,omitempty"`
}

// maxValue bounds a secret's value read from a file.
const maxValue = 64 << 10

// SourceValues reads sources' values: env by getenv, files as they are
// when asked (their last line end dropped).
func SourceValues(sources []Source, getenv func(string) string) Values {
	return func(name string) (string, error) {
		for _, s := range sources {
			if s.Name != name {
				continue
			}
			switch {
			case s.Env != "":
				v := getenv(s.Env)
				if v == "" {
					return "", fmt.Errorf("the environment variable %s is empty or unset", s.Env)
				}
				return v, nil
			case s.File != "":
				f, err := os.Open(s.File)
				if err != nil {
					return "", err
				}
				defer f.Close()
				b, err := io.ReadAll(io.LimitReader(f, maxValue+1))
				if err != nil {
					return "", err
				}
				if len(b) > maxValue {
					return "", fmt.Errorf("%s is over %d bytes", s.File, maxValue)
				}
				return strings.TrimRight(string(b), "\r\n"), nil
			}
		}
		return "", fmt.Errorf("no source for secret %s here", name)
	}
}

// redact is the one point every record of the network log (and the
// holder's log, made from the same records) passes: a secret's value in
// any of its words (an upstream's error that quoted a request) becomes
// "[secret NAME]".
func (b *Broker) redact(r *Record) {
	if b == nil || b.Values == nil {
		return
	}
	for _, s := range b.Secrets {
		v, err := b.Values(s.Name)
		if err != nil || len(v) < 4 {
			continue
		}
		for _, f := range []*string{&r.Host, &r.Rule, &r.Reason, &r.Error, &r.Method} {
			*f = strings.ReplaceAll(*f, v, "[secret "+s.Name+"]")
		}
	}
}
