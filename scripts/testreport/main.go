// Command testreport reads `go test -json` on its standard input and
// prints what a plain `go test` prints (each package's ok/FAIL line, the
// output of the tests that failed, build errors), then where the time
// went: every package's time, longest first, and the slowest tests. It
// exits 1 when a test or a package failed, or when the stream ended
// without a package's result (a killed run).
//
// `make test` pipes its go test through it; `.ci/run` prints the summary
// again at the end of its output (-summary FILE).
//
//	go test -json ./... | go run ./scripts/testreport -summary /tmp/tests.txt -top 30
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	summary := flag.String("summary", "", "also write the time summary to this file")
	raw := flag.String("raw", "", "also keep the whole JSON stream in this file")
	top := flag.Int("top", 30, "how many of the slowest tests to list")
	flag.Parse()

	var in io.Reader = os.Stdin
	if *raw != "" {
		f, err := os.Create(*raw)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		defer f.Close()
		in = io.TeeReader(os.Stdin, f)
	}
	// Unbuffered: a package's line shows when it ends, not when the run does.
	r := newReport(os.Stdout)
	if err := r.read(in); err != nil {
		fmt.Fprintln(os.Stderr, "testreport: reading go test -json:", err)
		os.Exit(2)
	}
	text := r.summary(*top)
	fmt.Print(text)
	if *summary != "" {
		if err := os.WriteFile(*summary, []byte(text), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
	}
	if r.failed() {
		os.Exit(1)
	}
}
