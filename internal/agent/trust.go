package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// systemBundles are where images keep their CA bundle, most common first
// (Debian and Ubuntu, Alpine, Fedora and RHEL, openSUSE).
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/ssl/cert.pem",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
}

// InstallTrust writes the sandbox's CA certificate (pem, read from the
// host) into dir as ca.pem, and the image's own CA bundle with it
// appended as ca-bundle.pem, each written whole under a temporary name
// and renamed: what SSL_CERT_FILE and the other CA variables name, so a
// client that trusts the relay's certificates still trusts every other
// host's. It returns the system bundle it found ("" none: the bundle
// then holds the sandbox's CA only).
func InstallTrust(dir string, pem []byte) (string, error) {
	if !bytes.Contains(pem, []byte("-----BEGIN CERTIFICATE-----")) || len(pem) > 64<<10 {
		return "", errors.New("not a PEM certificate")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var system []byte
	found := ""
	for _, p := range systemBundles {
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			system, found = b, p
			break
		}
	}
	if len(system) > 0 && system[len(system)-1] != '\n' {
		system = append(system, '\n')
	}
	for name, content := range map[string][]byte{"ca.pem": pem, "ca-bundle.pem": append(system, pem...)} {
		if err := writeWhole(filepath.Join(dir, name), content); err != nil {
			return "", err
		}
	}
	return found, nil
}

func writeWhole(path string, b []byte) error {
	tmp := fmt.Sprintf("%s.new-%d", path, os.Getpid())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// readPEM reads the certificate the host sends on stdin (bounded).
func readPEM(r io.Reader) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, 64<<10+1))
}
