package runtime

import (
	"strings"
	"unicode/utf8"
)

// ClientReads reports whether a docker or podman client, or a program it
// starts (ssh, the dynamic loader, the Go runtime), reads the variable
// from its own environment: where it connects, which binary or library it
// loads, which certificates it trusts, where it keeps its state. A
// sandbox's value for such a name must not be in the client's
// environment. The proxy variables (ProxyVar) are apart: the client reads
// them only to reach an engine over a network.
func ClientReads(name string) bool {
	if clientVarNames[name] {
		return true
	}
	for _, p := range clientVarPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// ProxyVar reports whether name is one of the proxy variables (either
// case), which a client reads to reach an engine over tcp or ssh.
func ProxyVar(name string) bool {
	switch strings.ToUpper(name) {
	case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY":
		return name == strings.ToUpper(name) || name == strings.ToLower(name)
	}
	return false
}

var clientVarNames = map[string]bool{
	"PATH": true, "HOME": true, "TMPDIR": true, "USER": true, "XDG_RUNTIME_DIR": true, "XDG_CONFIG_HOME": true,
	"XDG_DATA_HOME": true, "XDG_CACHE_HOME": true, "XDG_STATE_HOME": true, "SSL_CERT_FILE": true, "SSL_CERT_DIR": true,
	"GODEBUG": true, "GOTRACEBACK": true, "GOMAXPROCS": true, "GOGC": true, "GOMEMLIMIT": true,
	"DBUS_SESSION_BUS_ADDRESS": true, "NOTIFY_SOCKET": true, "REGISTRY_AUTH_FILE": true,
}

var clientVarPrefixes = []string{"DOCKER_", "CONTAINER_", "CONTAINERS_", "_CONTAINERS_", "PODMAN_", "BUILDAH_", "STORAGE_", "LD_", "DYLD_", "SSH_"}

// EnvFileSafe reports whether an env file holds v as it is: one line, no
// NUL, UTF-8 (docker and podman read it a line at a time).
func EnvFileSafe(v string) bool {
	return !strings.ContainsAny(v, "\n\r\x00") && utf8.ValidString(v)
}
