package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// testdata/stream.json is a real `go test -json` run (go 1.26) of three
// packages: one with a passing, a failing (in a subtest) and a skipped
// test, one that passes, and one that does not build.
func TestReportOfARealRun(t *testing.T) {
	data, err := os.ReadFile("testdata/stream.json")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r := newReport(&out)
	if err := r.read(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if !r.failed() {
		t.Error("a run with a failed test and a failed build is not reported failed")
	}
	got := out.String()
	for _, want := range []string{
		"said before failing", "--- FAIL: TestBad/sub", // the failed test's output
		"FAIL\ttr/a\t", "ok  \ttr/b\t", // the package lines
		"c/c_test.go:3:33: undefined: undefined", "FAIL\ttr/c [build failed]", // the build's
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"quiet", "not here", "=== RUN   TestFine"} {
		if strings.Contains(got, not) {
			t.Errorf("output of a test that did not fail (%q) was printed:\n%s", not, got)
		}
	}
	sum := r.summary(2)
	for _, want := range []string{"test time by package", "tr/a", "tr/b", "the 2 costliest tests", "the 2 slowest single tests"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
}

func TestReportFailures(t *testing.T) {
	for _, tt := range []struct {
		name, stream string
		failed       bool
		says         string
	}{
		{"a pass", `{"Action":"start","Package":"p"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":1.5}
{"Action":"pass","Package":"p","Elapsed":2}`, false, "1.5s  pass  p TestA"},
		{"killed before its result", `{"Action":"start","Package":"p"}
{"Action":"output","Package":"p","Test":"TestA","Output":"waiting\n"}`, true, "NO RESULT: p"},
		{"go test's own error", "go: updates to go.mod needed\n", true, ""},
		{"a package that timed out", `{"Action":"start","Package":"p"}
{"Action":"output","Package":"p","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"p","Output":"panic: test timed out after 1s\n"}
{"Action":"fail","Package":"p","Elapsed":1}`, true, "1.0s  fail  p"},
		{"empty", "", false, "in all packages"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			r := newReport(&out)
			if err := r.read(strings.NewReader(tt.stream)); err != nil {
				t.Fatal(err)
			}
			if r.failed() != tt.failed {
				t.Errorf("failed = %v, want %v", r.failed(), tt.failed)
			}
			if s := out.String() + r.summary(30); !strings.Contains(s, tt.says) {
				t.Errorf("report lacks %q:\n%s", tt.says, s)
			}
		})
	}
	// A hung test's output is shown when its package fails.
	var out bytes.Buffer
	r := newReport(&out)
	_ = r.read(strings.NewReader(`{"Action":"output","Package":"p","Test":"TestHang","Output":"last words\n"}
{"Action":"fail","Package":"p","Elapsed":1}`))
	if !strings.Contains(out.String(), "last words") {
		t.Errorf("an unfinished test's output was not shown when its package failed: %q", out.String())
	}
}

func FuzzReport(f *testing.F) {
	data, err := os.ReadFile("testdata/stream.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(`{"Action":"fail","Package":"p","Test":"T","Elapsed":-1e308}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newReport(&bytes.Buffer{})
		_ = r.read(bytes.NewReader(data))
		_ = r.summary(30)
		_ = r.failed()
	})
}

// A test whose targets are parallel subtests: its Elapsed is its own
// function's, its time in the summary is from its run to its end.
func TestReportParentWallTime(t *testing.T) {
	stream := `{"Time":"2026-11-28T10:00:00Z","Action":"run","Package":"p","Test":"TestEach"}
{"Time":"2026-11-28T10:00:00Z","Action":"run","Package":"p","Test":"TestEach/docker"}
{"Time":"2026-11-28T10:01:30Z","Action":"pass","Package":"p","Test":"TestEach/docker","Elapsed":90}
{"Time":"2026-11-28T10:01:30Z","Action":"pass","Package":"p","Test":"TestEach","Elapsed":0.2}`
	r := newReport(&bytes.Buffer{})
	if err := r.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if s := r.summary(30); !strings.Contains(s, "90.0s  p TestEach\n") || !strings.Contains(s, "90.0s  pass  p TestEach/docker\n") {
		t.Errorf("the parent's cost is not its subtests', or the subtest is not listed:\n%s", s)
	}
}

// A parallel test's time starts when it goes on, not while it waits for
// a slot.
func TestReportParallelTestFromItsCont(t *testing.T) {
	stream := `{"Time":"2026-11-28T10:00:00Z","Action":"run","Package":"p","Test":"TestP"}
{"Time":"2026-11-28T10:00:00Z","Action":"pause","Package":"p","Test":"TestP"}
{"Time":"2026-11-28T10:05:00Z","Action":"cont","Package":"p","Test":"TestP"}
{"Time":"2026-11-28T10:05:10Z","Action":"pass","Package":"p","Test":"TestP","Elapsed":10}`
	r := newReport(&bytes.Buffer{})
	if err := r.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if s := r.summary(30); !strings.Contains(s, "10.0s  pass  p TestP\n") {
		t.Errorf("a parallel test's wait for a slot counted as its time:\n%s", s)
	}
}
