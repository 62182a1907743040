// Command netpolicy enforces NetworkPolicies on the project's own
// single-node cluster (scripts/kube.sh), whose bridge CNI enforces none:
// the part of NetworkPolicy hsbx relies on, and no more. It polls the API
// server (four times a second, with the admin's client certificate) for
// Pods, NetworkPolicies and Namespaces and keeps one iptables chain,
// HSBX-NETPOL, hooked first into FORWARD and INPUT, equal to what they
// say: a Pod selected by a policy whose policyTypes name Egress has every
// packet from its address rejected (to other Pods, the node, anywhere);
// one whose policyTypes name Ingress has every packet to it rejected. A
// policy's allow rules are not implemented: a policy with any is enforced
// as if it had none (denying more, never less) and said so in the log.
// Selectors: matchLabels and matchExpressions (In, NotIn, Exists,
// DoesNotExist). A namespace labelled hsbx.dev/netpolicy=off is left
// alone: it plays a cluster whose CNI enforces nothing, for the test that
// hsbx refuses such a cluster. The chain is replaced in one
// iptables-restore; on SIGTERM it is unhooked and deleted.
//
//	netpolicy -server https://127.0.0.1:6443 -ca CA -cert CERT -key KEY
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/proc"
)

const chain = "HSBX-NETPOL"

func main() {
	server := flag.String("server", "https://127.0.0.1:6443", "the API server")
	ca := flag.String("ca", "", "the API server's CA certificate (PEM)")
	cert := flag.String("cert", "", "the client certificate (PEM)")
	key := flag.String("key", "", "the client key (PEM)")
	every := flag.Duration("every", 250*time.Millisecond, "how often the cluster is read")
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	client, err := newClient(*ca, *cert, *key)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	e := &enforcer{api: *server, http: client, run: &proc.Runner{}}
	if err := e.hook(ctx); err != nil {
		log.Fatal(err)
	}
	if b, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables"); err != nil || strings.TrimSpace(string(b)) != "1" {
		if werr := os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("1"), 0o644); werr != nil {
			log.Printf("bridged traffic is not seen by iptables (br_netfilter: %v %v): Pod-to-Pod packets on the bridge are not filtered", err, werr)
		}
	}
	log.Printf("enforcing NetworkPolicies from %s", *server)
	for {
		if err := e.sync(ctx); err != nil && ctx.Err() == nil {
			log.Printf("sync: %v", err)
		}
		select {
		case <-ctx.Done():
			e.unhook()
			log.Print("stopped")
			return
		case <-time.After(*every):
		}
	}
}

func newClient(caFile, certFile, keyFile string) (*http.Client, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", caFile)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}}, nil
}

type enforcer struct {
	api     string
	http    *http.Client
	run     *proc.Runner
	applied string
	warned  map[string]bool
}

type selector struct {
	MatchLabels      map[string]string `json:"matchLabels"`
	MatchExpressions []struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	} `json:"matchExpressions"`
}

func (s selector) matches(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, x := range s.MatchExpressions {
		v, ok := labels[x.Key]
		switch x.Operator {
		case "In":
			if !ok || !slices.Contains(x.Values, v) {
				return false
			}
		case "NotIn":
			if ok && slices.Contains(x.Values, v) {
				return false
			}
		case "Exists":
			if !ok {
				return false
			}
		case "DoesNotExist":
			if ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}

type meta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels"`
}

type podList struct {
	Items []struct {
		Metadata meta `json:"metadata"`
		Status   struct {
			Phase string `json:"phase"`
			PodIP string `json:"podIP"`
		} `json:"status"`
	} `json:"items"`
}

type policyList struct {
	Items []struct {
		Metadata meta `json:"metadata"`
		Spec     struct {
			PodSelector selector          `json:"podSelector"`
			PolicyTypes []string          `json:"policyTypes"`
			Ingress     []json.RawMessage `json:"ingress"`
			Egress      []json.RawMessage `json:"egress"`
		} `json:"spec"`
	} `json:"items"`
}

type namespaceList struct {
	Items []struct {
		Metadata meta `json:"metadata"`
	} `json:"items"`
}

func (e *enforcer) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.api+path, nil)
	if err != nil {
		return err
	}
	res, err := e.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %.200s", path, res.Status, b)
	}
	return json.Unmarshal(b, v)
}

// sync reads the cluster and replaces the chain when what it should hold
// changed.
func (e *enforcer) sync(ctx context.Context) error {
	var pods podList
	var pols policyList
	var nss namespaceList
	if err := e.get(ctx, "/api/v1/namespaces", &nss); err != nil {
		return err
	}
	if err := e.get(ctx, "/apis/networking.k8s.io/v1/networkpolicies", &pols); err != nil {
		return err
	}
	if err := e.get(ctx, "/api/v1/pods", &pods); err != nil {
		return err
	}
	off := map[string]bool{}
	for _, ns := range nss.Items {
		off[ns.Metadata.Name] = ns.Metadata.Labels["hsbx.dev/netpolicy"] == "off"
	}
	var rules []string
	for _, p := range pods.Items {
		ip := net.ParseIP(p.Status.PodIP)
		if ip == nil || ip.To4() == nil || off[p.Metadata.Namespace] || p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" {
			continue
		}
		var in, out bool
		for _, np := range pols.Items {
			if np.Metadata.Namespace != p.Metadata.Namespace || !np.Spec.PodSelector.matches(p.Metadata.Labels) {
				continue
			}
			types := np.Spec.PolicyTypes
			if len(types) == 0 {
				types = []string{"Ingress"}
				if len(np.Spec.Egress) > 0 {
					types = append(types, "Egress")
				}
			}
			if (len(np.Spec.Ingress) > 0 || len(np.Spec.Egress) > 0) && !e.warned[np.Metadata.Namespace+"/"+np.Metadata.Name] {
				if e.warned == nil {
					e.warned = map[string]bool{}
				}
				e.warned[np.Metadata.Namespace+"/"+np.Metadata.Name] = true
				log.Printf("policy %s/%s has allow rules, which this enforcer does not implement: enforced as deny-all", np.Metadata.Namespace, np.Metadata.Name)
			}
			in = in || slices.Contains(types, "Ingress")
			out = out || slices.Contains(types, "Egress")
		}
		if out {
			rules = append(rules, fmt.Sprintf("-A %s -s %s/32 -m comment --comment %s/%s -j REJECT --reject-with icmp-admin-prohibited", chain, ip, p.Metadata.Namespace, p.Metadata.Name))
		}
		if in {
			rules = append(rules, fmt.Sprintf("-A %s -d %s/32 -m comment --comment %s/%s -j REJECT --reject-with icmp-admin-prohibited", chain, ip, p.Metadata.Namespace, p.Metadata.Name))
		}
	}
	slices.Sort(rules)
	want := "*filter\n:" + chain + " - [0:0]\n" + strings.Join(rules, "\n")
	if len(rules) > 0 {
		want += "\n"
	}
	want += "COMMIT\n"
	if want == e.applied {
		return nil
	}
	if err := e.iptables(ctx, strings.NewReader(want), "iptables-restore", "--noflush"); err != nil {
		return err
	}
	e.applied = want
	log.Printf("%d rule(s) in %s", len(rules), chain)
	return nil
}

func (e *enforcer) iptables(ctx context.Context, stdin io.Reader, argv ...string) error {
	res, err := e.run.Run(ctx, proc.Cmd{Argv: argv, Env: os.Environ(), Stdin: stdin, Timeout: 20 * time.Second})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("%s: exit %d: %s", strings.Join(argv, " "), res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return err
}

// hook makes the chain and jumps to it first from FORWARD (Pod to Pod,
// and to anywhere past the node) and INPUT (Pod to the node itself).
func (e *enforcer) hook(ctx context.Context) error {
	if err := e.iptables(ctx, nil, "iptables", "-w", "-N", chain); err != nil {
		if lerr := e.iptables(ctx, nil, "iptables", "-w", "-L", chain, "-n"); lerr != nil {
			return err
		}
	}
	for _, from := range []string{"FORWARD", "INPUT"} {
		if err := e.iptables(ctx, nil, "iptables", "-w", "-C", from, "-j", chain); err == nil {
			continue
		}
		if err := e.iptables(ctx, nil, "iptables", "-w", "-I", from, "1", "-j", chain); err != nil {
			return err
		}
	}
	return nil
}

func (e *enforcer) unhook() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, from := range []string{"FORWARD", "INPUT"} {
		_ = e.iptables(ctx, nil, "iptables", "-w", "-D", from, "-j", chain)
	}
	_ = e.iptables(ctx, nil, "iptables", "-w", "-F", chain)
	_ = e.iptables(ctx, nil, "iptables", "-w", "-X", chain)
}
