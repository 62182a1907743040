package sandbox

import "testing"

func FuzzParseVolume(f *testing.F) {
	for _, s := range []string{"/a:/b", "/a:/b:ro", "a:b", "::", "/a:/b:ro:x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVolume(s)
		if err == nil && (v.Host == "" || v.Container == "") {
			t.Fatalf("accepted %q as %+v", s, v)
		}
	})
}

func FuzzSanitizeLabel(f *testing.F) {
	f.Add("a/b")
	f.Add("😀")
	f.Fuzz(func(t *testing.T, s string) {
		l := SanitizeLabel(s)
		if l == "" || len(l) > 63 {
			t.Fatalf("SanitizeLabel(%q) = %q", s, l)
		}
		k := Key{Profile: s, Task: s}
		if !nameRE.MatchString(k.Name()) {
			t.Fatalf("Name %q invalid", k.Name())
		}
	})
}
