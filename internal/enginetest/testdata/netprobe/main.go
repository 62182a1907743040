// Command netprobe is what the egress tests run in a sandbox: an
// unmodified Go HTTP client (it reads the proxy variables as any program
// built on net/http does) and the ways a hostile process would try to get
// out without it. Each mode prints one line a result and exits 0 when it
// got through, 1 when it did not.
//
//	netprobe get URL [CA-PEM]   GET through the proxy variables: "STATUS BODY"
//	netprobe secret URL VAR [HOST]
//	                            GET with "Authorization: Bearer $VAR" (and
//	                            Host: HOST): "STATUS BODY"
//	netprobe many N URL         N GETs at once: "OK/N"
//	netprobe seq N URL VAR [CA-PEM]
//	                            N GETs one after another, each a new
//	                            connection, with "Authorization: Bearer $VAR":
//	                            "MS" (the whole run, in milliseconds)
//	netprobe dial HOST:PORT     a raw TCP connect, ignoring the proxy variables
//	netprobe udp HOST:PORT      a UDP datagram, and wait for an answer
//	netprobe dns NAME           a DNS lookup (the pure Go resolver)
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: netprobe get|many|dial|udp|dns ARGS")
		os.Exit(2)
	}
	ok := false
	switch os.Args[1] {
	case "get":
		ca := ""
		if len(os.Args) > 3 {
			ca = os.Args[3]
		}
		ok = get(os.Args[2], ca)
	case "secret":
		host := ""
		if len(os.Args) > 4 {
			host = os.Args[4]
		}
		ok = secret(os.Args[2], os.Getenv(os.Args[3]), host)
	case "seq":
		n, _ := strconv.Atoi(os.Args[2])
		ca := ""
		if len(os.Args) > 5 {
			ca = os.Args[5]
		}
		ok = seq(n, os.Args[3], os.Getenv(os.Args[4]), ca)
	case "many":
		n, _ := strconv.Atoi(os.Args[2])
		ok = many(n, os.Args[3])
	case "dial":
		c, err := net.DialTimeout("tcp", os.Args[2], 3*time.Second)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			_, _ = io.WriteString(c, "GET / HTTP/1.0\r\n\r\n")
			b, _ := io.ReadAll(c)
			c.Close()
			fmt.Printf("connected: %q\n", b)
			ok = true
		} else {
			fmt.Println("no:", err)
		}
	case "udp":
		c, err := net.Dial("udp", os.Args[2])
		if err == nil {
			_, err = c.Write([]byte("ping"))
		}
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			b := make([]byte, 64)
			var n int
			n, err = c.Read(b)
			if err == nil {
				fmt.Printf("answered: %q\n", b[:n])
				ok = true
			}
		}
		if err != nil {
			fmt.Println("no:", err)
		}
	case "dns":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		as, err := (&net.Resolver{PreferGo: true}).LookupHost(ctx, os.Args[2])
		if err == nil {
			fmt.Println("resolved:", strings.Join(as, " "))
			ok = true
		} else {
			fmt.Println("no:", err)
		}
	}
	if !ok {
		os.Exit(1)
	}
}

func client(ca string) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			fmt.Println("no:", err)
			os.Exit(2)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	tr.MaxIdleConnsPerHost = 100
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func get(url, ca string) bool {
	resp, err := client(ca).Get(url)
	if err != nil {
		fmt.Println("no:", err)
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s\n", resp.StatusCode, strings.TrimSpace(string(b)))
	return true
}

func secret(url, value, host string) bool {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		fmt.Println("no:", err)
		return false
	}
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Authorization", "Bearer "+value)
	resp, err := client("").Do(req)
	if err != nil {
		fmt.Println("no:", err)
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s\n", resp.StatusCode, strings.TrimSpace(string(b)))
	return true
}

func seq(n int, url, value, ca string) bool {
	cl := client(ca)
	cl.Transport.(*http.Transport).DisableKeepAlives = true
	start := time.Now()
	for range n {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+value)
		resp, err := cl.Do(req)
		if err != nil {
			fmt.Println("no:", err)
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			fmt.Println("no: status", resp.StatusCode)
			return false
		}
	}
	fmt.Println(time.Since(start).Milliseconds())
	return true
}

func many(n int, url string) bool {
	cl := client("")
	var good atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := cl.Get(url)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				good.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	fmt.Printf("%d/%d\n", good.Load(), n)
	return int(good.Load()) == n
}
