package enginecli

import (
	"errors"
	"testing"

	"github.com/hsbx/hsbx/runtime"
)

func TestPullRules(t *testing.T) {
	for _, c := range []struct {
		stderr string
		want   error
	}{
		// captured here: docker 20.10, podman 4.3, no network
		{`Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on 10.255.255.53:53: no such host`, runtime.ErrRegistryUnreachable},
		{`Error: initializing source docker://alpine:3: pinging container registry registry-1.docker.io: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on 10.255.255.53:53: no such host`, runtime.ErrRegistryUnreachable},
		// the registry clients' fixed texts
		{`Error response from daemon: Get "https://r.example/v2/": net/http: TLS handshake timeout`, runtime.ErrRegistryUnreachable},
		{`Error response from daemon: Get "https://r.example/v2/": x509: certificate signed by unknown authority`, runtime.ErrRegistryTLS},
		{`Error: initializing source docker://r.example/a:1: pinging container registry r.example: Get "https://r.example/v2/": tls: failed to verify certificate: x509: certificate has expired or is not yet valid`, runtime.ErrRegistryTLS},
		{`Error response from daemon: Get "https://r.example/v2/": dial tcp 10.0.0.1:443: connect: connection refused`, runtime.ErrRegistryUnreachable},
		{`Error response from daemon: Get "https://r.example/v2/": dial tcp 10.0.0.1:443: i/o timeout`, runtime.ErrRegistryUnreachable},
		{`Error response from daemon: Head "https://r.example/v2/a/manifests/1": unauthorized: authentication required`, runtime.ErrRegistryAuth},
		{`Error response from daemon: manifest for alpine:nope not found: manifest unknown: manifest unknown`, runtime.ErrImageNotFound},
		{`Error response from daemon: pull access denied for nosuch, repository does not exist or may require 'docker login': denied: requested access to the resource is denied`, runtime.ErrImageNotFound},
		{`Error: initializing source docker://quay.io/a/b:1: reading manifest 1 in quay.io/a/b: name unknown: repository not found`, runtime.ErrImageNotFound},
		// nothing known: the dialect decides
		{`Error: something else entirely`, nil},
	} {
		if got := Match(PullRules, c.stderr); !errors.Is(got, c.want) || (c.want == nil && got != nil) {
			t.Errorf("%q: %v, want %v", c.stderr, got, c.want)
		}
	}
}
