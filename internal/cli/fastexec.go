package cli

import "strings"

// fastExec reads the common shape of an exec command line without kong:
// `[GLOBAL...] exec [FLAG...] -- CMD...`, every flag spelled out with its
// value (`--task T`, `--task=T`, `-e K=V`, `-i`, ...). Building kong's
// model costs most of a warm exec's own time (see parse), and a session
// runs hundreds of these. Anything else — help, a bundle like -it, a
// value that is empty or begins with '-', no "--", an unknown word — is
// not taken (ok false) and kong parses it, with the last word on errors.
// TestFastExecAgreesWithKong and FuzzFastExec hold the two to the same
// result.
func fastExec(args []string) (g Globals, c ExecCmd, ok bool) {
	g, rest, ok := fastParse(args, "exec", func(name string) bool {
		switch name {
		case "-i", "--interactive":
			c.Interactive = true
		case "-t", "--tty":
			c.TTY = true
		default:
			return false
		}
		return true
	}, func(name, value string) bool {
		switch name {
		case "--task":
			c.Task = nameFlag{Value: value, Set: true}
		case "-w", "--workdir":
			c.Workdir = value
		case "-u", "--user":
			c.User = value
		case "-e", "--env":
			c.Env = append(c.Env, value)
		case "--timeout":
			c.Timeout = value
		case "--max-output":
			c.MaxOutput = value
		default:
			return false
		}
		return true
	})
	c.Cmd = rest
	return g, c, ok
}

// fastRun is fastExec for `hsbx run`, the other command a session makes
// hundreds of times (TestFastRunAgreesWithKong, FuzzFastRun).
func fastRun(args []string) (g Globals, c RunCmd, ok bool) {
	g, rest, ok := fastParse(args, "run", func(name string) bool {
		if name == "-i" || name == "--interactive" {
			c.Interactive = true
			return true
		}
		return false
	}, func(name, value string) bool {
		switch name {
		case "--task":
			c.Task = nameFlag{Value: value, Set: true}
		case "-s", "--session":
			c.Session = value
		case "-u", "--user":
			c.User = value
		case "--timeout":
			c.Timeout = value
		case "--max-output":
			c.MaxOutput = value
		default:
			return false
		}
		return true
	})
	c.Text = rest
	return g, c, ok
}

// fastParse reads `[GLOBAL...] command [FLAG...] -- REST...`: the globals
// itself, the command's flags through boolFlag and valueFlag (false: not
// one of its flags, so not taken).
func fastParse(args []string, command string, boolFlag func(name string) bool, valueFlag func(name, value string) bool) (g Globals, rest []string, ok bool) {
	seenCmd := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if !seenCmd {
				return g, nil, false
			}
			return g, append([]string{}, args[i+1:]...), true
		}
		if a == command && !seenCmd {
			seenCmd = true
			continue
		}
		name, value, inline := strings.Cut(a, "=")
		if !strings.HasPrefix(name, "-") {
			return g, nil, false
		}
		if name == "--json" {
			if inline {
				return g, nil, false
			}
			g.JSON = true
			continue
		}
		if seenCmd && !inline && boolFlag(name) {
			continue
		}
		if name == "-i" || name == "--interactive" || name == "-t" || name == "--tty" {
			return g, nil, false // inline, before the command, or not the command's
		}
		if inline && !strings.HasPrefix(name, "--") {
			return g, nil, false // -e=K=V: kong's business
		}
		if !inline {
			if i+1 >= len(args) {
				return g, nil, false
			}
			i++
			value = args[i]
		}
		if value == "" || strings.HasPrefix(value, "-") {
			return g, nil, false
		}
		switch name {
		case "--runtime":
			g.Runtime = value
		case "--profile":
			g.Profile = nameFlag{Value: value, Set: true}
		case "--config":
			g.Config = value
		case "--log-level":
			g.LogLevel = value
		case "--engine-timeout":
			g.EngineTimeout = value
		case "--kube-context":
			g.KubeContext = value
		case "--kube-namespace":
			g.KubeNamespace = value
		default:
			if !seenCmd || !valueFlag(name, value) {
				return g, nil, false
			}
		}
	}
	return g, nil, false
}
