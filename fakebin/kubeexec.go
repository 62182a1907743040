package fakebin

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The fake kubectl's exec, and the environment block hsbx's sh wrapper reads.

// kexec runs `exec [-i] [-t] NAME -c sandbox -- CMD...`. hsbx's wrapper
// (/bin/sh -c SCRIPT hsbx-exec ENV WORKDIR CMD...) is understood: the
// environment is read from the first ENV bytes of stdin, or is the marker
// alone when ENV is "m" and its value. A non-zero
// status ends stderr with kubectl's own line, as the real one does.
func (f *fake) kexec(ns string, args []string) int {
	var name string
	var cmd []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--":
			cmd = args[i+1:]
			i = len(args)
		case a == "-c" && i+1 < len(args):
			i++
		case strings.HasPrefix(a, "-"):
		default:
			name = a
		}
	}
	var c *Container
	if err := f.st.view(func(st *State) error {
		for _, x := range st.Containers {
			if x.Namespace == ns && x.Name == name {
				cp := *x
				c = &cp
			}
		}
		return nil
	}); err != nil {
		return f.fail(err)
	}
	switch {
	case c == nil:
		fmt.Fprintf(f.stderr, "Error from server (NotFound): pods %q not found\n", name)
		return 1
	case c.State == "exited":
		fmt.Fprintf(f.stderr, "error: cannot exec into a container in a completed pod; current phase is %s\n", f.pod(c)["status"].(map[string]any)["phase"])
		return 1
	case c.State != "running":
		fmt.Fprintf(f.stderr, "error: unable to upgrade connection: container not found (\"sandbox\")\n")
		return 1
	}
	env := append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME=" + c.Name}, c.Env...)
	wd := c.WorkDir
	wrapped := len(cmd) >= 6 && cmd[0] == "/bin/sh" && cmd[1] == "-c" && cmd[3] == "hsbx-exec"
	if wrapped {
		src := cmd[4]
		if cmd[5] != "" {
			wd = cmd[5]
		}
		cmd = cmd[6:]
		if marker, ok := strings.CutPrefix(src, "m"); ok {
			env = append(env, "HSBX_EXEC_ID="+marker) // the marker alone, on argv
		} else if src != "0" {
			n, err := strconv.Atoi(src)
			block := make([]byte, max(n, 0))
			if err == nil {
				_, err = io.ReadFull(f.stdin, block)
			}
			vars, ok := parseEnvBlock(string(block))
			if err != nil || !ok {
				fmt.Fprintln(f.stderr, "hsbx: the command's environment did not arrive (the image needs sh and dd)")
				return f.kstatus(126)
			}
			env = append(env, vars...)
		}
	}
	if len(cmd) == 0 {
		return f.kusage("you must specify at least one command for the container")
	}
	// What the Pod has besides the builtins: busybox's tar (hsbx writes
	// its agent in with it), and the files written so.
	copied := strings.HasPrefix(cmd[0], "/") && fileExists(f.containerFile(c.ID, cmd[0]))
	if wrapped && !builtins[cmd[0]] && cmd[0] != "tar" && !copied { // the wrapper's exec, as busybox sh in the Pod says it
		if _, code := startFailure(cmd[0]); code == 126 {
			fmt.Fprintf(f.stderr, "/bin/sh: exec: line 11: %s: Permission denied\n", cmd[0])
			return f.kstatus(126)
		}
		fmt.Fprintf(f.stderr, "/bin/sh: exec: line 11: %s: not found\n", cmd[0])
		return f.kstatus(127)
	}
	if !wrapped && !builtins[cmd[0]] && !copied {
		// the runtime's exec of a missing executable: kubectl's internal error
		what, _ := startFailure(cmd[0])
		fmt.Fprintf(f.stderr, "error: Internal error occurred: Internal error occurred: error executing command in container: failed to exec in container: failed to start exec %q: OCI runtime exec failed: exec failed: unable to start container process: %s: unknown\n", c.ID, what)
		return 1
	}
	if strings.Contains(strings.Join(cmd, " "), "sort -u") && strings.Contains(strings.Join(cmd, " "), "/proc/[0-9]*") {
		for _, e := range c.Execs { // LiveExecs: the markers of the commands that run
			if e.Token != "" && alive(e.Pid) {
				fmt.Fprintf(f.stdout, "HSBX_EXEC_ID=%s\n", e.Token)
			}
		}
		return 0
	}
	return f.kstatus(f.runExec(c, cmd, wd, env))
}

// kstatus ends a non-zero exec as kubectl does.
func (f *fake) kstatus(code int) int {
	if code != 0 {
		fmt.Fprintf(f.stderr, "command terminated with exit code %d\n", code)
	}
	return code
}

// parseEnvBlock reads the wrapper's "export K='v'" lines; ok says the
// closing HSBX_ENV_OK=1 arrived.
func parseEnvBlock(b string) (vars []string, ok bool) {
	for b != "" {
		switch {
		case strings.HasPrefix(b, "HSBX_ENV_OK=1\n"):
			return vars, true
		case strings.HasPrefix(b, "export "):
			k, rest, found := strings.Cut(strings.TrimPrefix(b, "export "), "='")
			if !found {
				return vars, false
			}
			var v strings.Builder
			for {
				i := strings.IndexByte(rest, '\'')
				if i < 0 {
					return vars, false
				}
				v.WriteString(rest[:i])
				rest = rest[i+1:]
				if strings.HasPrefix(rest, `\''`) {
					v.WriteByte('\'')
					rest = rest[3:]
					continue
				}
				break
			}
			vars = append(vars, k+"="+v.String())
			b = strings.TrimPrefix(rest, "\n")
		default:
			return vars, false
		}
	}
	return vars, false
}
