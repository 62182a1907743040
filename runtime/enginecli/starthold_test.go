package enginecli

import (
	"bytes"
	"testing"
)

func TestStartHold(t *testing.T) {
	const oci = `OCI runtime exec failed: exec failed: unable to start container process: exec: "x": executable file not found in $PATH: unknown` + "\n"
	for _, c := range []struct {
		name      string
		writes    []string
		code      int
		failure   bool
		out       string // what reached dst in the end
		beforeEnd string // what reached dst before finish
	}{
		{"the runtime's line, status 126", []string{oci}, 126, true, "", ""},
		{"in pieces", []string{oci[:5], oci[5:40], oci[40:]}, 126, true, "", ""},
		{"status 127", []string{oci}, 127, true, "", ""},
		{"the same line with status 0 is output", []string{oci}, 0, false, oci, ""},
		{"the same line with more after it is output", []string{oci, "more\n"}, 126, false, oci + "more\n", ""},
		{"a prompt passes at once", []string{"Password: "}, 0, false, "Password: ", "Password: "},
		{"a partial prefix is held until it diverges", []string{"OCI", " runtime", "X"}, 0, false, "OCI runtimeX", "OCI runtimeX"},
		{"other lines pass at once", []string{"hello\n", "OCI runtime exec failed: \n"}, 126, false, "hello\nOCI runtime exec failed: \n", "hello\nOCI runtime exec failed: \n"},
		{"nothing", nil, 126, false, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var dst bytes.Buffer
			h := newStartHold(&dst)
			for _, w := range c.writes {
				if n, err := h.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write: %d %v", n, err)
				}
			}
			if dst.String() != c.beforeEnd {
				t.Errorf("before the end: %q, want %q", dst.String(), c.beforeEnd)
			}
			f := h.finish(c.code)
			if (f != nil) != c.failure {
				t.Errorf("failure %+v, want %v", f, c.failure)
			}
			if dst.String() != c.out {
				t.Errorf("output %q, want %q", dst.String(), c.out)
			}
		})
	}
}

func TestStartHoldReleasesAHugeLine(t *testing.T) {
	var dst bytes.Buffer
	h := newStartHold(&dst)
	big := append([]byte("OCI runtime exec failed: "), bytes.Repeat([]byte("a"), 2*startHoldMax)...)
	_, _ = h.Write(big)
	if dst.Len() != len(big) {
		t.Errorf("a line longer than the hold's bound was held: %d of %d bytes out", dst.Len(), len(big))
	}
}
