package enginecli

import (
	"os"
	"path/filepath"
	"testing"
)

// Endpoint tells engines apart by what the client reads to pick one, and
// nothing else: two daemons (DOCKER_HOST, a context, docker's current
// context in its config file), two podman connections, two binaries.
func TestEndpoint(t *testing.T) {
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".docker"), 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(cfg string) {
		if err := os.WriteFile(filepath.Join(home, ".docker", "config.json"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"HOME=" + home, "PATH=/usr/bin", "TERM=xterm"}
	write(`{"auths":{}}`)
	plain := Endpoint("docker", "/usr/bin/docker", base)
	for name, tc := range map[string]struct {
		dialect, bin string
		env          []string
		cfg          string
		same         bool
	}{
		"unrelated variables":       {"docker", "/usr/bin/docker", append(base, "LANG=C", "DOCKER_CERT_PATH=/x"), `{"auths":{}}`, true},
		"the default context":       {"docker", "/usr/bin/docker", base, `{"currentContext":"default"}`, true},
		"garbage config":            {"docker", "/usr/bin/docker", base, `{`, true},
		"another DOCKER_HOST":       {"docker", "/usr/bin/docker", append(base, "DOCKER_HOST=tcp://b:2376"), `{}`, false},
		"DOCKER_CONTEXT":            {"docker", "/usr/bin/docker", append(base, "DOCKER_CONTEXT=b"), `{}`, false},
		"docker context use":        {"docker", "/usr/bin/docker", base, `{"currentContext":"b"}`, false},
		"another binary":            {"docker", "/usr/local/bin/docker", base, `{}`, false},
		"podman":                    {"podman", "/usr/bin/docker", base, `{}`, false},
		"a podman connection":       {"podman", "/usr/bin/docker", append(base, "CONTAINER_CONNECTION=b"), `{}`, false},
		"DOCKER_HOST over context":  {"docker", "/usr/bin/docker", append(base, "DOCKER_HOST=tcp://b:2376"), `{"currentContext":"c"}`, false},
		"a context in another home": {"docker", "/usr/bin/docker", []string{"HOME=" + t.TempDir()}, `{}`, true},
	} {
		write(tc.cfg)
		got := Endpoint(tc.dialect, tc.bin, tc.env)
		if (got == plain) != tc.same {
			t.Errorf("%s: endpoint %q, plain %q: same = %v, want %v", name, got, plain, got == plain, tc.same)
		}
	}
	write(`{"currentContext":"b"}`)
	a := Endpoint("docker", "/usr/bin/docker", append(base, "DOCKER_HOST=tcp://b:2376"))
	write(`{"currentContext":"c"}`)
	if b := Endpoint("docker", "/usr/bin/docker", append(base, "DOCKER_HOST=tcp://b:2376")); a != b {
		t.Errorf("with DOCKER_HOST set the config's context does not count: %q, %q", a, b)
	}
}
