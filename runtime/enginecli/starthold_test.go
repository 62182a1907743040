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

// With a user asked for, the engines' refusal of it (docker on stdout,
// exit 126; podman on stderr after "Error: ", exit 255, captured) is held
// and taken when it is all the stream carried; without one it is output.
func TestStartHoldUserRefused(t *testing.T) {
	const docker = "unable to find user nosuch: no matching entries in passwd file\n"
	const podman = "Error: unable to find group g: no matching entries in group file\n"
	for _, c := range []struct {
		name    string
		user    bool
		writes  []string
		code    int
		refused string
		out     string
	}{
		{"docker", true, []string{docker[:9], docker[9:]}, 126, "unable to find user nosuch: no matching entries in passwd file", ""},
		{"podman", true, []string{podman}, 255, "unable to find group g: no matching entries in group file", ""},
		{"no user asked", false, []string{docker}, 126, "", docker},
		{"the command's own line, exit 0", true, []string{docker}, 0, "", docker},
		{"more after it", true, []string{docker, "x\n"}, 126, "", docker + "x\n"},
		{"other words", true, []string{"unable to find your keys\n"}, 126, "", "unable to find your keys\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var dst bytes.Buffer
			h := newStartHold(&dst)
			h.user = c.user
			for _, w := range c.writes {
				_, _ = h.Write([]byte(w))
			}
			if f := h.finish(c.code); f != nil || h.refused != c.refused || dst.String() != c.out {
				t.Errorf("failure %v, refused %q, output %q; want refused %q, output %q", f, h.refused, dst.String(), c.refused, c.out)
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
