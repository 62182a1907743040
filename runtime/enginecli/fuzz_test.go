package enginecli_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/docker"
	"github.com/hsbx/hsbx/runtime/enginecli"
	"github.com/hsbx/hsbx/runtime/podman"
)

// seedCaptures adds every captured stdout/stderr as a fuzz seed.
func seedCaptures(f *testing.F, pattern string) {
	files, _ := filepath.Glob(filepath.Join("../../testdata/engines/*", pattern))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(""))
	f.Add([]byte("[]"))
	f.Add([]byte("null"))
	f.Add([]byte(`[{"Id":"x","State":{"Status":"running","FinishedAt":"0001-01-01T00:00:00Z"}}]`))
}

func FuzzParseInspect(f *testing.F) {
	seedCaptures(f, "inspect_*.stdout")
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := enginecli.ParseInspect(b)
		if err != nil && cs != nil {
			t.Fatalf("containers returned with error")
		}
		for _, c := range cs {
			if c.ID == "" || c.Labels == nil {
				t.Fatalf("container without ID or labels map: %+v", c)
			}
		}
	})
}

func FuzzDockerParsePS(f *testing.F) {
	seedCaptures(f, "ps_*.stdout")
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := docker.Dialect{}.ParsePS(b)
		if err == nil {
			for _, c := range cs {
				if c.ID == "" || c.Labels == nil {
					t.Fatalf("bad container %+v", c)
				}
			}
		}
	})
}

func FuzzPodmanParsePS(f *testing.F) {
	seedCaptures(f, "ps_*.stdout")
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := podman.Dialect{}.ParsePS(b)
		if err == nil {
			for _, c := range cs {
				if c.ID == "" || c.Labels == nil {
					t.Fatalf("bad container %+v", c)
				}
			}
		}
	})
}

func FuzzParseInfo(f *testing.F) {
	seedCaptures(f, "*info.stdout")
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = docker.Dialect{}.ParseInfo(b)
		_, _ = podman.Dialect{}.ParseInfo(b)
		_, _ = docker.Dialect{}.ParseVersion(b)
		_, _ = podman.Dialect{}.ParseVersion(b)
	})
}

func FuzzClassify(f *testing.F) {
	seedCaptures(f, "*.stderr")
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, op := range []enginecli.Op{enginecli.OpExec, enginecli.OpRun, enginecli.OpRemove} {
			for _, code := range []int{1, 125, 255} {
				_ = docker.Dialect{}.Classify(op, code, string(b))
				_ = podman.Dialect{}.Classify(op, code, string(b))
			}
		}
	})
}

func FuzzParseLabels(f *testing.F) {
	f.Add("hermes-agent=1,hermes-task-id=t1,weird=a,b=c")
	f.Add(",=,,=x,")
	f.Fuzz(func(t *testing.T, s string) {
		if docker.ParseLabels(s) == nil {
			t.Fatal("nil map")
		}
	})
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-11-22T06:05:03.297767106Z", "2026-11-22 06:04:34.577754154 +0000 UTC",
		"0001-01-01T00:00:00Z", "-62135596800", "1795328736", "1795328736.5", "garbage", "1e309", "NaN",
		"2026-11-22 06:04:34.577754154 +0000 UTC m=+0.000000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, err := runtime.ParseTime(s)
		if err != nil && !tm.IsZero() {
			t.Fatalf("error with a time: %v %v", tm, err)
		}
		if err == nil && !tm.IsZero() && tm.Year() <= 1 {
			t.Fatalf("year-1 time %v is not 'never'", tm)
		}
	})
}

func FuzzParseImageInspect(f *testing.F) {
	seedCaptures(f, "image_inspect*.stdout")
	f.Add([]byte(`[{"Id":"sha256:x","Config":{"Entrypoint":"/init"}}]`))
	f.Add([]byte(`[{"Id":"x","Config":{"Entrypoint":["/init",1]}}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		img, err := enginecli.ParseImageInspect(b)
		if err == nil && img.ID == "" {
			t.Fatalf("accepted an image without an id: %q", b)
		}
		imgs, err := enginecli.ParseImagesInspect(b)
		for _, im := range imgs {
			if err != nil || im.ID == "" || im.Labels == nil {
				t.Fatalf("images %+v (%v) from %q: each with an id and labels", imgs, err, b)
			}
		}
	})
}

func FuzzParseTopExecs(f *testing.F) {
	f.Add([]byte("PID         PPID\n1           0\n6           1\n7           0\n"))
	f.Add([]byte("PID PPID\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := enginecli.ParseTopExecs(b)
		if err == nil && n < 0 {
			t.Fatalf("%d execs", n)
		}
	})
}
