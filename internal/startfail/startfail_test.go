package startfail

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		line string
		want Failure
		ok   bool
	}{
		// docker 20.10 (runc), captured
		{`OCI runtime exec failed: exec failed: unable to start container process: exec: "no-such-command": executable file not found in $PATH: unknown`,
			Failure{"no-such-command", "executable file not found in $PATH", 127}, true},
		{`OCI runtime exec failed: exec failed: unable to start container process: exec: "/nonexist/x": stat /nonexist/x: no such file or directory: unknown`,
			Failure{"/nonexist/x", "no such file or directory", 127}, true},
		{`OCI runtime exec failed: exec failed: unable to start container process: exec: "/etc": permission denied: unknown`,
			Failure{"/etc", "permission denied", 126}, true},
		{`OCI runtime exec failed: exec failed: unable to start container process: exec: "/x.arm": exec format error: unknown`,
			Failure{"/x.arm", "exec format error", 126}, true},
		// docker 20.10 with Debian's runsc (gVisor), captured 2026-11-28
		{`OCI runtime exec failed: executing processes for container: executing command "/.hsbx-agent-nope features" in sandbox: failed to load /.hsbx-agent-nope: no such file or directory: unknown`,
			Failure{"/.hsbx-agent-nope", "no such file or directory", 127}, true},
		{`OCI runtime exec failed: executing processes for container: executing command "nosuchcmd" in sandbox: error finding executable "nosuchcmd" in PATH [/usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin]: no such file or directory: unknown`,
			Failure{"nosuchcmd", "executable file not found in $PATH", 127}, true},
		{`OCI runtime exec failed: executing processes for container: executing command "/etc" in sandbox: failed to load /etc: permission denied: unknown`,
			Failure{"/etc", "permission denied", 126}, true},
		// podman (runc), captured
		{`Error: runc: exec failed: unable to start container process: exec: "no-such-command": executable file not found in $PATH: OCI runtime attempted to invoke a command that was not found`,
			Failure{"no-such-command", "executable file not found in $PATH", 127}, true},
		{`Error: runc: exec failed: unable to start container process: exec: "/etc/passwd": permission denied: OCI permission denied`,
			Failure{"/etc/passwd", "permission denied", 126}, true},
		{`Error: runc: runc create failed: unable to start container process: error during container init: exec: "x": executable file not found in $PATH: OCI runtime attempted to invoke a command that was not found`,
			Failure{"x", "executable file not found in $PATH", 127}, true},
		// podman (crun), as crun words it
		{"Error: crun: executable file `nope` not found in $PATH: No such file or directory: OCI runtime attempted to invoke a command that was not found",
			Failure{"nope", "executable file not found in $PATH", 127}, true},
		// kubectl (containerd + runc)
		{`error: Internal error occurred: Internal error occurred: error executing command in container: failed to exec in container: failed to start exec "abc": OCI runtime exec failed: exec failed: unable to start container process: exec: "x y": executable file not found in $PATH: unknown`,
			Failure{"x y", "executable file not found in $PATH", 127}, true},
		// names with quotes, commas and '=' survive
		{`OCI runtime exec failed: exec failed: unable to start container process: exec: "a\"b,c=d": executable file not found in $PATH: unknown`,
			Failure{`a"b,c=d`, "executable file not found in $PATH", 127}, true},
		// not a start failure
		{`OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd ("/nope") set in config.json failed: no such file or directory: unknown`, Failure{}, false},
		{`Error: No such container: x`, Failure{}, false},
		{`unable to start container process: exec: "x": executable file not found in $PATH`, Failure{}, false},
		{`OCI runtime exec failed: exec failed: unable to start container process: exec: "": executable file not found`, Failure{}, false},
		{`OCI runtime exec failed: exec failed: unable to start container process: exec: "x`, Failure{}, false},
		{``, Failure{}, false},
	} {
		got, ok := Parse(c.line)
		if ok != c.ok || got != c.want {
			t.Errorf("Parse(%q) = %+v %v, want %+v %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

func TestMessageIsTheAgents(t *testing.T) {
	f := Failure{"no-such-command", "executable file not found in $PATH", 127}
	if got := f.Message(); got != `hsbx: exec: "no-such-command": executable file not found in $PATH` {
		t.Errorf("Message() = %q", got)
	}
}

func TestMayBegin(t *testing.T) {
	for in, want := range map[string]bool{
		"":                             true,
		"O":                            true,
		"OCI runtime exec":             true,
		"OCI runtime exec failed: xyz": true,
		"Error: r":                     true,
		"Error: crun: x":               true,
		"error: Internal":              true,
		"Password: ":                   false,
		"OCX":                          false,
		"hello":                        false,
	} {
		if got := MayBegin([]byte(in)); got != want {
			t.Errorf("MayBegin(%q) = %v, want %v", in, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`OCI runtime exec failed: exec failed: unable to start container process: exec: "x": executable file not found in $PATH: unknown`)
	f.Add("Error: crun: executable file `x` not found in $PATH: No such file or directory")
	f.Add(`Error: runc: exec failed: unable to start container process: exec: "/etc": permission denied: OCI permission denied`)
	f.Fuzz(func(t *testing.T, line string) {
		got, ok := Parse(line)
		if !ok {
			return
		}
		if got.Name == "" || got.Reason == "" || (got.Code != 126 && got.Code != 127) {
			t.Fatalf("Parse(%q) = %+v", line, got)
		}
		if !MayBegin([]byte(strings.TrimSpace(line))) {
			t.Fatalf("Parse took %q but MayBegin refuses it", line)
		}
	})
}
