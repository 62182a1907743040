package config

import (
	"os"
	"path/filepath"
	"testing"
)

func FuzzConfigFile(f *testing.F) {
	f.Add("profile = \"x\"\n[sandbox]\nimage = \"a\"\ncpu = 1.5\nvolumes = [\"/a:/b\"]\nenv = { A = \"1\" }\n[reaper]\nlifetime = \"300s\"\n")
	f.Add("[sandbox]\nmemory = \"5g\"\n")
	f.Add("image = = x")
	f.Add("[sandbox.env]\nA = 1\nB = true\n")
	f.Fuzz(func(t *testing.T, text string) {
		p := filepath.Join(t.TempDir(), "c.toml")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Load(Options{File: p})
		if err == nil {
			_ = c.Spec() // every accepted file yields a spec without panicking
			c.All()
		}
	})
}

func FuzzEnvValue(f *testing.F) {
	for _, s := range []string{"true", "no", "1.5", "5120", "300s", "90", `["a","b"]`, `{"A":"1","B":2}`, `"str"`, "[1]", "{", "-5", "NaN", "1e400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		s := Defaults()
		for _, f := range s.fields() {
			if err := f.set(raw, "env X"); err == nil && (f.source() != "env X" || f.value() == nil) {
				t.Fatalf("%s: set %q without error but holds %v from %s", f.key, raw, f.value(), f.source())
			}
		}
	})
}

// decodeSecrets never panics, and what it takes has only known keys and
// absolute files.
func FuzzDecodeSecrets(f *testing.F) {
	f.Add(`[{"name":"K","hosts":["x.example"],"env":"K"}]`)
	f.Add(`[{"name":"K","hosts":["x.example:443"],"file":"/k","header":"Authorization: Bearer {}"}]`)
	f.Add(`[{"name":"K","file":"~/k"}]`)
	f.Fuzz(func(t *testing.T, raw string) {
		list, err := decodeSecrets([]byte(raw))
		if err != nil {
			return
		}
		for _, d := range list {
			if d.File != "" && !filepath.IsAbs(d.File) {
				t.Fatalf("a relative file was taken: %q", d.File)
			}
		}
	})
}
