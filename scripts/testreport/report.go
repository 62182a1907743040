package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, with
// the build events of go 1.24 and later).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Elapsed    float64 // seconds, on pass, fail and skip
	Output     string
}

// timing is one finished test or package.
type timing struct {
	name    string // the package, and the test's name after a space
	seconds float64
	result  string // pass, fail, skip
	test    string // the test's name alone ("" for a package)
}

// report holds what has been read so far.
type report struct {
	w        io.Writer
	pending  map[string][]string  // a running test's output, by package and test
	began    map[string]time.Time // a running test's start, by package and test
	tests    []timing
	packages []timing
	started  map[string]bool // packages with a start event and no result yet
	bad      []string        // lines that were not JSON (go test's own errors)
	fail     bool
}

func newReport(w io.Writer) *report {
	return &report{w: w, pending: map[string][]string{}, began: map[string]time.Time{}, started: map[string]bool{}}
}

// read consumes the stream. A line that is not an event is go test's own
// output (a setup failure): printed as it is and counted as a failure.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			fmt.Fprintf(r.w, "%s\n", line)
			r.bad = append(r.bad, string(line))
			continue
		}
		r.add(ev)
	}
	return sc.Err()
}

func (r *report) add(ev event) {
	key := ev.Package + "\x00" + ev.Test
	switch {
	case ev.Action == "build-output":
		fmt.Fprint(r.w, ev.Output)
	case ev.Action == "build-fail":
		r.fail = true
	case ev.Action == "start":
		r.started[ev.Package] = true
	case ev.Action == "run" || ev.Action == "cont":
		// A parallel test pauses until it has a slot: its time is from
		// when it went on.
		r.began[key] = ev.Time
	case ev.Action == "output" && ev.Test == "":
		// The package's own lines: ok/FAIL, a timeout's panic, TestMain's.
		fmt.Fprint(r.w, ev.Output)
	case ev.Action == "output":
		r.pending[key] = append(r.pending[key], ev.Output)
	case ev.Test != "" && (ev.Action == "pass" || ev.Action == "skip" || ev.Action == "fail"):
		if ev.Action == "fail" {
			// As plain go test: a failed test's whole output.
			fmt.Fprint(r.w, strings.Join(r.pending[key], ""))
		}
		delete(r.pending, key)
		// A test's Elapsed leaves out its parallel subtests, which run
		// after its own function returns: the wall time from its run (or,
		// parallel, from when it went on) to its end holds them.
		secs := ev.Elapsed
		if t0, ok := r.began[key]; ok && !t0.IsZero() && !ev.Time.IsZero() {
			secs = max(secs, ev.Time.Sub(t0).Seconds())
		}
		delete(r.began, key)
		r.tests = append(r.tests, timing{ev.Package + " " + ev.Test, secs, ev.Action, ev.Test})
	case ev.Test == "" && (ev.Action == "pass" || ev.Action == "skip" || ev.Action == "fail"):
		delete(r.started, ev.Package)
		if ev.Action == "fail" {
			r.fail = true
			// Output of tests that never ended (the binary was killed by
			// go test's timeout or a crash): what they printed so far.
			for k, lines := range r.pending {
				if strings.HasPrefix(k, ev.Package+"\x00") {
					fmt.Fprintf(r.w, "--- (unfinished) %s\n%s", strings.TrimPrefix(k, ev.Package+"\x00"), strings.Join(lines, ""))
					delete(r.pending, k)
				}
			}
		}
		r.packages = append(r.packages, timing{ev.Package, ev.Elapsed, ev.Action, ""})
	}
}

// failed reports whether the run failed: a failed test, package or build,
// a line go test printed instead of an event, or a package that started
// and never ended.
func (r *report) failed() bool {
	if r.fail || len(r.bad) > 0 || len(r.started) > 0 {
		return true
	}
	for _, t := range r.tests {
		if t.result == "fail" {
			return true
		}
	}
	return false
}

// summary is where the time went: the packages longest first (with no
// test files left out), then the top slowest tests, subtests included.
func (r *report) summary(top int) string {
	var b strings.Builder
	pkgs := append([]timing(nil), r.packages...)
	sort.SliceStable(pkgs, func(i, j int) bool { return pkgs[i].seconds > pkgs[j].seconds })
	var total float64
	fmt.Fprintf(&b, "\n== test time by package (longest first)\n")
	for _, p := range pkgs {
		if p.result == "skip" { // no test files
			continue
		}
		total += p.seconds
		fmt.Fprintf(&b, "%9.1fs  %-4s  %s\n", p.seconds, p.result, p.name)
	}
	fmt.Fprintf(&b, "%9.1fs  in all packages (summed; they run side by side)\n", total)
	// A test with subtests is timed by them: its leaves (the tests with
	// none, each from when it went on), and in all (the sum of its
	// leaves: what it costs the run, whatever ran beside it).
	parent := map[string]bool{}
	for _, t := range r.tests {
		pkg := strings.TrimSuffix(t.name, " "+t.test)
		for p := t.test; strings.Contains(p, "/"); {
			p = p[:strings.LastIndex(p, "/")]
			parent[pkg+" "+p] = true
		}
	}
	var leaves []timing
	cost := map[string]float64{}
	for _, t := range r.tests {
		if parent[t.name] {
			continue
		}
		leaves = append(leaves, t)
		topTest, _, _ := strings.Cut(t.test, "/")
		cost[strings.TrimSuffix(t.name, " "+t.test)+" "+topTest] += t.seconds
	}
	var tops []timing
	for name, s := range cost {
		tops = append(tops, timing{name: name, seconds: s})
	}
	sort.SliceStable(leaves, func(i, j int) bool { return leaves[i].seconds > leaves[j].seconds })
	sort.Slice(tops, func(i, j int) bool {
		if tops[i].seconds != tops[j].seconds {
			return tops[i].seconds > tops[j].seconds
		}
		return tops[i].name < tops[j].name
	})
	leaves, tops = leaves[:min(top, len(leaves))], tops[:min(top, len(tops))]
	fmt.Fprintf(&b, "\n== the %d costliest tests (the time of all their subtests, added up)\n", len(tops))
	for _, t := range tops {
		fmt.Fprintf(&b, "%9.1fs  %s\n", t.seconds, t.name)
	}
	fmt.Fprintf(&b, "\n== the %d slowest single tests (subtests with none of their own, each from when it went on)\n", len(leaves))
	for _, t := range leaves {
		fmt.Fprintf(&b, "%9.1fs  %-4s  %s\n", t.seconds, t.result, t.name)
	}
	for p := range r.started {
		fmt.Fprintf(&b, "NO RESULT: %s started and never ended\n", p)
	}
	return b.String()
}
