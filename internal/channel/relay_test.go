package channel

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/egress"
)

// relayed starts an in-process agent, a Conn to it and a relay for allow
// on a free loopback port; it returns the relay's address and the records
// logged.
func relayed(t *testing.T, allow []string) (addr string, records func() []egress.Record) {
	t.Helper()
	c := pair(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	var mu sync.Mutex
	var recs []egress.Record
	px, err := NewProxy(egress.Posture{Addr: addr, Allow: allow}, nil, "sb", "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	inner := px.Log
	px.Log = func(r egress.Record) {
		inner(r)
		mu.Lock()
		recs = append(recs, r)
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Relay(ctx, c, RelaySpec{Addr: addr, Proxy: px, Retry: 20 * time.Millisecond}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Relay: %v", err)
		}
	})
	for i := 0; ; i++ {
		nc, err := net.Dial("tcp", addr)
		if err == nil {
			nc.Close()
			break
		}
		if i > 200 {
			t.Fatalf("the relay never listened on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return addr, func() []egress.Record {
		mu.Lock()
		defer mu.Unlock()
		return append([]egress.Record(nil), recs...)
	}
}

func hostServer(t *testing.T, h http.HandlerFunc) (netip.AddrPort, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	ap := netip.MustParseAddrPort(ln.Addr().String())
	return ap, strconv.Itoa(int(ap.Port()))
}

func proxyClient(proxy string) *http.Client {
	u, _ := http.NewRequest("GET", "http://"+proxy, nil)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u.URL), DisableKeepAlives: true}}
}

func TestRelayAllowsWhatTheListNamesAndRefusesTheRest(t *testing.T) {
	ok, _ := hostServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached "+r.URL.Path) })
	_, otherPort := hostServer(t, func(w http.ResponseWriter, r *http.Request) { t.Error("the refused server was reached") })
	addr, records := relayed(t, []string{ok.String(), "localhost"})
	cl := proxyClient(addr)

	resp, err := cl.Get("http://" + ok.String() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "reached /x" {
		t.Fatalf("allowed: %d %q", resp.StatusCode, body)
	}
	for _, u := range []string{"http://127.0.0.1:" + otherPort + "/", "http://localhost:" + otherPort + "/"} {
		resp, err = cl.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(body), "refused") {
			t.Fatalf("%s: %d %q, want a 403 saying why", u, resp.StatusCode, body)
		}
		t.Logf("%s: %s", u, strings.TrimSpace(string(body)))
	}
	// localhost is named, but it resolves to loopback, which only the
	// address itself may open.
	if !strings.Contains(string(body), "loopback") {
		t.Fatalf("localhost: %q does not say loopback", body)
	}
	// An allowed connection is logged when it ends, which may be after
	// the client has its answer (and after the refusals).
	recs := records()
	for deadline := time.Now().Add(5 * time.Second); len(recs) < 3 && time.Now().Before(deadline); recs = records() {
		time.Sleep(10 * time.Millisecond)
	}
	allowed, refused := 0, 0
	for _, r := range recs {
		switch {
		case r.Allowed && r.Rule == ok.String() && r.BytesIn > 0 && r.BytesOut > 0:
			allowed++
		case !r.Allowed && r.Reason != "":
			refused++
		}
	}
	if len(recs) != 3 || allowed != 1 || refused != 2 {
		t.Fatalf("records: %+v", recs)
	}
}

func TestRelayTunnelsConnectAndPassesHalfCloses(t *testing.T) {
	// An echo server that answers only once its client has ended its data.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				_, _ = c.Write([]byte(strings.ToUpper(string(b))))
			}()
		}
	}()
	addr, records := relayed(t, []string{ln.Addr().String()})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			fmt.Fprintf(nc, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n", ln.Addr())
			br := bufio.NewReader(nc)
			status, _ := br.ReadString('\n')
			if !strings.Contains(status, " 200 ") {
				errs <- fmt.Errorf("%d: %q", i, status)
				return
			}
			for l, _ := br.ReadString('\n'); l != "\r\n" && l != ""; l, _ = br.ReadString('\n') {
			}
			msg := fmt.Sprintf("hello %d", i)
			_, _ = io.WriteString(nc, msg)
			_ = nc.(*net.TCPConn).CloseWrite()
			got, _ := io.ReadAll(br)
			if string(got) != strings.ToUpper(msg) {
				errs <- fmt.Errorf("%d: got %q", i, got)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := len(records())
	for deadline := time.Now().Add(5 * time.Second); n < 64 && time.Now().Before(deadline); n = len(records()) {
		time.Sleep(10 * time.Millisecond)
	}
	if n != 64 {
		t.Errorf("%d records, want 64", n)
	}
}
