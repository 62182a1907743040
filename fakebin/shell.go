package fakebin

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// shell runs cmd "inside" container c: a handful of builtins and a tiny
// `sh -c` (statements separated by ; or &&, `exit N`, `>&2`, $VAR), which
// is all the scripts need. Anything else is "not found", as in a real
// image without that program.
func (f *fake) shell(c *Container, cmd []string, wd string, env []string) int {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	sh := &miniShell{f: f, c: c, wd: wd, env: env, vars: vars, stdout: f.stdout, stderr: f.stderr}
	code, _ := sh.run(cmd)
	return code
}

type miniShell struct {
	f              *fake
	c              *Container
	wd             string
	env            []string
	vars           map[string]string
	stdout, stderr io.Writer
}

// run executes one command; exited says `exit` was called.
func (s *miniShell) run(cmd []string) (code int, exited bool) {
	if len(cmd) == 0 {
		return 0, false
	}
	out := s.stdout
	var kept []string
	for _, w := range cmd {
		switch {
		case w == ">&2":
			out = s.stderr
		case strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>"):
			// redirections to files (>/dev/null): output dropped
			if !strings.Contains(w, "&1") {
				out = io.Discard
			}
		default:
			kept = append(kept, w)
		}
	}
	cmd = kept
	if len(cmd) == 0 {
		return 0, false
	}
	switch cmd[0] {
	case "exec":
		code, _ := s.run(cmd[1:])
		return code, true
	case "command":
		if len(cmd) == 3 && cmd[1] == "-v" {
			if builtins[cmd[2]] {
				fmt.Fprintln(out, "/bin/"+cmd[2])
				return 0, false
			}
			return 1, false
		}
		return s.run(cmd[1:])
	case "true", ":":
		return 0, false
	case "false":
		return 1, false
	case "echo":
		args := cmd[1:]
		nl := "\n"
		if len(args) > 0 && args[0] == "-n" {
			args, nl = args[1:], ""
		}
		fmt.Fprint(out, strings.Join(args, " ")+nl)
		return 0, false
	case "printf": // FORMAT [ARG...]: backslash escapes (\n \t \\ \NNN octal) and %s
		if len(cmd) < 2 {
			fmt.Fprintln(s.stderr, "printf: usage: printf FORMAT [ARG]...")
			return 1, false
		}
		fmt.Fprint(out, printfFormat(cmd[1], cmd[2:]))
		return 0, false
	case "tar":
		// tar -x -f - -C DIR: the archive on stdin, extracted in the
		// container (hsbx writes its agent so where the engine's cp
		// cannot: under gVisor).
		if len(cmd) == 6 && cmd[1] == "-x" && cmd[2] == "-f" && cmd[3] == "-" && cmd[4] == "-C" && s.f.stdin != nil {
			return s.f.extract(s.c.ID, cmd[5]), false
		}
		fmt.Fprintln(s.stderr, "tar: only -x -f - -C DIR here")
		return 2, false
	case "cat":
		if s.f.stdin != nil {
			io.Copy(out, s.f.stdin)
		}
		return 0, false
	case "env":
		for _, kv := range s.env {
			fmt.Fprintln(out, kv)
		}
		return 0, false
	case "printenv":
		if len(cmd) > 1 {
			v, ok := s.vars[cmd[1]]
			if !ok {
				return 1, false
			}
			fmt.Fprintln(out, v)
		}
		return 0, false
	case "pwd":
		fmt.Fprintln(out, s.wd)
		return 0, false
	case "yes":
		line := "y"
		if len(cmd) > 1 {
			line = strings.Join(cmd[1:], " ")
		}
		for {
			if _, err := fmt.Fprintln(out, line); err != nil {
				return 141, true // killed by SIGPIPE, as the real yes is
			}
		}
	case "seq": // seq LAST | seq FIRST LAST
		first, last := 1, 0
		var err error
		switch len(cmd) {
		case 2:
			last, err = strconv.Atoi(cmd[1])
		case 3:
			if first, err = strconv.Atoi(cmd[1]); err == nil {
				last, err = strconv.Atoi(cmd[2])
			}
		default:
			err = fmt.Errorf("usage: seq [FIRST] LAST")
		}
		if err != nil {
			fmt.Fprintf(s.stderr, "seq: %v\n", err)
			return 1, false
		}
		w := bufio.NewWriterSize(out, 64<<10)
		for i := first; i <= last; i++ {
			w.WriteString(strconv.Itoa(i))
			if err := w.WriteByte('\n'); err != nil {
				return 141, true
			}
		}
		if w.Flush() != nil {
			return 141, true
		}
		return 0, false
	case "hostname":
		fmt.Fprintln(out, s.c.ID[:12])
		return 0, false
	case "id":
		fmt.Fprintln(out, "uid=0(root) gid=0(root) groups=0(root)")
		return 0, false
	case "ps":
		return s.ps(out), false
	case "sleep":
		if len(cmd) > 1 {
			if cmd[1] == "infinity" {
				sleepForever()
			}
			if secs, err := strconv.ParseFloat(cmd[1], 64); err == nil {
				time.Sleep(time.Duration(secs * float64(time.Second)))
			}
		}
		return 0, false
	case "exit":
		n := 0
		if len(cmd) > 1 {
			n, _ = strconv.Atoi(cmd[1])
		}
		return n & 0xff, true
	case "sh", "bash", "/bin/sh", "/bin/bash":
		if s.f.env["FAKEENGINE_NO_SHELL"] != "" {
			break // an image without a shell
		}
		return s.sh(cmd[1:]), false
	}
	if strings.Contains(runtimeOf(s.c), "runsc") {
		return s.f.gvisorError(runtimeOf(s.c), cmd), true
	}
	what, code := startFailure(cmd[0])
	return s.f.ociError(what, code), true
}

// gvisorError is gVisor's (runsc's) failure to start cmd, as each engine
// prints it (captured from docker 20.10 and podman 4.3 with Debian's
// runsc): docker on stdout with 126, podman on stderr with 127 or 126.
func (f *fake) gvisorError(runtime string, cmd []string) int {
	name := cmd[0]
	cause, code := fmt.Sprintf("failed to load %s: no such file or directory", name), 127
	switch {
	case name == "/etc/passwd" || name == "/etc/group" || name == "/" || name == "/etc" || name == "/tmp":
		cause, code = fmt.Sprintf("failed to load %s: permission denied", name), 126
	case !strings.Contains(name, "/"):
		cause = fmt.Sprintf("error finding executable %q in PATH [/usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin]: no such file or directory", name)
	}
	what := fmt.Sprintf("executing processes for container: executing command %q in sandbox: %s", strings.Join(cmd, " "), cause)
	if f.dialect == "podman" {
		suffix := "OCI runtime attempted to invoke a command that was not found"
		if code == 126 {
			suffix = "OCI permission denied"
		}
		fmt.Fprintf(f.stderr, "Error: %s: %s: %s\n", runtime, what, suffix)
		return code
	}
	fmt.Fprintf(f.stdout, "OCI runtime exec failed: %s: unknown\n", what)
	return 126
}

// startFailure is runc's reason for not starting name (a command the fake
// does not know), and the status podman gives it: runc's words, captured.
func startFailure(name string) (string, int) {
	switch {
	case name == "/etc/passwd" || name == "/etc/group" || name == "/" || name == "/etc" || name == "/tmp":
		return fmt.Sprintf("exec: %q: permission denied", name), 126
	case strings.Contains(name, "/"):
		return fmt.Sprintf("exec: %q: stat %s: no such file or directory", name, name), 127
	}
	return fmt.Sprintf("exec: %q: executable file not found in $PATH", name), 127
}

// sh handles `sh [-l] [-c SCRIPT]`; without -c it reads nothing and exits 0.
func (s *miniShell) sh(args []string) int {
	for len(args) > 0 && (args[0] == "-l" || args[0] == "-i" || args[0] == "-lc") {
		if args[0] == "-lc" {
			args[0] = "-c"
			break
		}
		args = args[1:]
	}
	if len(args) < 2 || args[0] != "-c" {
		return 0
	}
	if strings.Contains(args[1], "/proc/[0-9]*") && strings.Contains(args[1], "HSBX_EXEC_ID") {
		return s.killByMarker(args[2:])
	}
	code, cond := 0, 0
	for _, stmt := range splitStatements(args[1]) {
		words := s.words(stmt)
		switch {
		case len(words) == 0:
			continue
		case words[0] == "if":
			cond, _ = s.run(words[1:])
			continue
		case words[0] == "then":
			if cond != 0 {
				continue
			}
			words = words[1:]
		case words[0] == "fi":
			cond = 0
			continue
		}
		var exited bool
		code, exited = s.run(words)
		if exited {
			return code
		}
	}
	return code
}

func splitStatements(script string) []string {
	script = strings.ReplaceAll(script, "&&", ";")
	script = strings.ReplaceAll(script, "\n", ";")
	var out []string
	var cur strings.Builder
	quote := rune(0)
	for _, r := range script {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == ';':
			out = append(out, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(out, cur.String())
}

// words splits a statement into words with '…' and "…" quoting and $VAR
// expansion (not inside single quotes).
func (s *miniShell) words(stmt string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	quote := rune(0)
	rs := []rune(stmt)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || (r == '"' && quote == 0):
			quote, inWord = r, true
		case r == '"' && quote == '"':
			quote = 0
		case r == '$':
			j := i + 1
			for j < len(rs) && (rs[j] == '_' || rs[j] >= 'A' && rs[j] <= 'Z' || rs[j] >= 'a' && rs[j] <= 'z' || rs[j] >= '0' && rs[j] <= '9') {
				j++
			}
			cur.WriteString(s.vars[string(rs[i+1:j])])
			i = j - 1
			inWord = true
		case (r == ' ' || r == '\t') && quote == 0:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// sleepForever blocks until the process is killed. (An empty select would
// trip the runtime's deadlock detector and exit instead.)
func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// killByMarker emulates hsbx's kill script (sh -c '<walk /proc, kill
// processes whose environ has HSBX_EXEC_ID=$1, or any HSBX_EXEC_ID when
// $1 is empty>' NAME TOKEN): the fake's "processes" are the exec children
// recorded in the state.
func (s *miniShell) killByMarker(args []string) int {
	if len(args) < 2 {
		return 1
	}
	token, n := args[1], 0
	seen := map[int]bool{}
	tokens := []string{token}
	_ = s.f.st.update(func(st *State) error {
		if c := st.find(s.c.ID); c != nil {
			for _, e := range c.Execs {
				seen[e.Pid] = true
			}
			if token == "" {
				// Any marker ($1 empty): the container's marked commands,
				// never an exec without one. The fake's other processes
				// are found by those commands' tokens, not host-wide.
				tokens = nil
				for _, e := range c.Execs {
					if e.Token != "" {
						tokens = append(tokens, e.Token)
					}
				}
				for _, t := range tokens {
					n += killExecs(c, t)
				}
			} else {
				n = killExecs(c, token)
			}
		}
		return nil
	})
	for _, t := range tokens {
		n += killMarkedProcs(t, seen)
	}
	fmt.Fprintln(s.stdout, n)
	return 0
}

// ps lists the container's processes: PID 1 and the live exec commands.
func (s *miniShell) ps(out io.Writer) int {
	fmt.Fprintln(out, "PID   USER     COMMAND")
	fmt.Fprintf(out, "    1 root     %s\n", strings.Join(s.c.Cmd, " "))
	_ = s.f.st.view(func(st *State) error {
		if c := st.find(s.c.ID); c != nil {
			for _, e := range c.Execs {
				if alive(e.Pid) && e.Pid != os.Getpid() {
					fmt.Fprintf(out, "%5d root     %s\n", e.Pid, strings.Join(e.Cmd, " "))
				}
			}
		}
		return nil
	})
	return 0
}

// builtins are the programs the fake image has (busybox-like: no bash).
var builtins = map[string]bool{"true": true, "false": true, "echo": true, "cat": true, "env": true,
	"printenv": true, "pwd": true, "hostname": true, "id": true, "sleep": true, "sh": true, "ps": true, "yes": true, "seq": true, "printf": true}

// printfFormat is printf's output for format and args (as busybox's for
// these cases): escapes, %s and %%; the format is reused while args last.
func printfFormat(format string, args []string) string {
	var b strings.Builder
	for {
		used := false
		for i := 0; i < len(format); i++ {
			ch := format[i]
			switch {
			case ch == '\\' && i+1 < len(format):
				i++
				switch e := format[i]; {
				case e == 'n':
					b.WriteByte('\n')
				case e == 't':
					b.WriteByte('\t')
				case e >= '0' && e <= '7':
					v, j := 0, i
					for ; j < len(format) && j < i+3 && format[j] >= '0' && format[j] <= '7'; j++ {
						v = v*8 + int(format[j]-'0')
					}
					b.WriteByte(byte(v))
					i = j - 1
				default:
					b.WriteByte(e)
				}
			case ch == '%' && i+1 < len(format) && format[i+1] == '%':
				b.WriteByte('%')
				i++
			case ch == '%' && i+1 < len(format) && format[i+1] == 's':
				if len(args) > 0 {
					b.WriteString(args[0])
					args = args[1:]
				}
				used = true
				i++
			default:
				b.WriteByte(ch)
			}
		}
		if !used || len(args) == 0 {
			return b.String()
		}
	}
}
