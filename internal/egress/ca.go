package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hsbx/hsbx/internal/privdir"
)

// CA is a sandbox's own certificate authority: the relay shows the
// sandbox certificates it signs for the hosts its secrets go to (and only
// those: its name constraints say so, so not even its key could make one
// a client would take for another host). Its certificate goes into the
// sandbox; its key stays on the host.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	pem  []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// newKey is a certificate's new key and random serial number.
func newKey() (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return key, serial, err
}

// NewCA makes a CA for a sandbox whose secrets go to hosts (Secret.Hosts'
// entries): its name constraints permit those names and addresses only.
func NewCA(name string, hosts []string) (*CA, error) {
	key, serial, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:                serial,
		Subject:                     pkix.Name{CommonName: "hsbx sandbox " + name, Organization: []string{"hsbx"}},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.AddDate(10, 0, 0),
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid:       true,
		IsCA:                        true,
		MaxPathLenZero:              true,
		PermittedDNSDomainsCritical: true,
	}
	for _, h := range hosts {
		r, err := ParseRule(h)
		if err != nil {
			return nil, err
		}
		switch {
		case r.IsName():
			d := strings.TrimPrefix(r.Name, "*") // "*.x" permits names under x: ".x"
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, d)
		default:
			tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, &net.IPNet{IP: r.Prefix.Addr().AsSlice(), Mask: net.CIDRMask(r.Prefix.Bits(), r.Prefix.Addr().BitLen())})
		}
	}
	if len(tmpl.PermittedDNSDomains) == 0 {
		// no names permitted: an empty DNS constraint would permit all
		tmpl.ExcludedDNSDomains = []string{""}
	}
	if len(tmpl.PermittedIPRanges) == 0 {
		tmpl.ExcludedIPRanges = []*net.IPNet{{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, {IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// CertPEM is the CA's certificate, what the sandbox trusts.
func (ca *CA) CertPEM() []byte { return ca.pem }

// KeyPEM is the CA's key, kept on the host only.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// LoadCA reads a CA's certificate and key (PEM), checking they belong
// together.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("the sandbox's CA: not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the sandbox's CA: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the sandbox's CA key: %w", err)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("the sandbox's CA key does not match its certificate")
	}
	return &CA{Cert: cert, Key: key, pem: pem.EncodeToMemory(cb)}, nil
}

// leaf is a certificate for host (a name or an address), signed by the
// CA, made once and kept.
func (ca *CA) leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok && time.Until(c.Leaf.NotAfter) > time.Hour {
		return c, nil
	}
	key, serial, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		tmpl.IPAddresses = []net.IP{a.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}
	if ca.leaves == nil {
		ca.leaves = map[string]*tls.Certificate{}
	}
	ca.leaves[host] = c
	return c, nil
}

// NonceLabel is the label of the sandbox's creation nonce
// (sandbox.LabelNonce), which names the files of its CA.
const NonceLabel = "hsbx.nonce"

// caFiles are where a sandbox's CA is kept in its key's state directory
// dir: named by the creation's nonce, so a creation that lost a race
// never overwrites the CA of the one that won.
func caFiles(dir, nonce string) (cert, key string) {
	base := filepath.Join(dir, "egress-ca-"+nonce)
	return base + ".pem", base + ".key"
}

// SaveCA writes ca into the key's state directory dir (made when
// missing), its files new, this user's and readable by this user only
// (opened without following a link: privdir.OpenFile).
func SaveCA(dir, nonce string, ca *CA) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("saving the sandbox's CA: %w", err)
	}
	certPath, keyPath := caFiles(dir, nonce)
	key, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	for p, b := range map[string][]byte{certPath: ca.CertPEM(), keyPath: key} {
		f, err := privdir.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("saving the sandbox's CA: %w", err)
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("saving the sandbox's CA: %w", err)
		}
	}
	return nil
}

// ReadCA reads the CA SaveCA kept for the creation nonce.
func ReadCA(dir, nonce string) (*CA, error) {
	if nonce == "" || strings.ContainsAny(nonce, "/\\.") {
		return nil, fmt.Errorf("the sandbox's CA: a bad nonce %q", nonce)
	}
	certPath, keyPath := caFiles(dir, nonce)
	var certPEM, keyPEM []byte
	for p, into := range map[string]*[]byte{certPath: &certPEM, keyPath: &keyPEM} {
		f, err := privdir.OpenFile(p, os.O_RDONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errNoCA, err)
		}
		*into, err = io.ReadAll(io.LimitReader(f, 64<<10))
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return LoadCA(certPEM, keyPEM)
}

// RemoveCA removes the CA files of nonce's sandbox from dir (the sandbox
// is gone: its CA's key goes with it).
func RemoveCA(dir, nonce string) {
	if dir == "" || nonce == "" || strings.ContainsAny(nonce, "/\\.") {
		return
	}
	certPath, keyPath := caFiles(dir, nonce)
	_ = os.Remove(keyPath)
	_ = os.Remove(certPath)
}

// PruneCAs removes the CA files in dir of every nonce but keep (the
// sandboxes they belonged to are gone: one sandbox a key).
func PruneCAs(dir, keep string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, "egress-ca-") && !strings.HasPrefix(n, "egress-ca-"+keep+".") {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
}
