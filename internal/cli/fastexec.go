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
	seenExec := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if !seenExec {
				return g, c, false
			}
			c.Cmd = append([]string{}, args[i+1:]...)
			return g, c, true
		}
		if a == "exec" && !seenExec {
			seenExec = true
			continue
		}
		name, value, inline := strings.Cut(a, "=")
		if !strings.HasPrefix(name, "-") {
			return g, c, false
		}
		if name == "-i" || name == "--interactive" || name == "-t" || name == "--tty" || name == "--json" {
			if inline || !seenExec && name != "--json" {
				return g, c, false
			}
			switch name {
			case "-i", "--interactive":
				c.Interactive = true
			case "-t", "--tty":
				c.TTY = true
			default:
				g.JSON = true
			}
			continue
		}
		if inline && !strings.HasPrefix(name, "--") {
			return g, c, false // -e=K=V: kong's business
		}
		if !inline {
			if i+1 >= len(args) {
				return g, c, false
			}
			i++
			value = args[i]
		}
		if value == "" || strings.HasPrefix(value, "-") {
			return g, c, false
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
			if !seenExec {
				return g, c, false
			}
			switch name {
			case "--task":
				c.Task = nameFlag{Value: value, Set: true}
			case "-w", "--workdir":
				c.Workdir = value
			case "-e", "--env":
				c.Env = append(c.Env, value)
			case "--timeout":
				c.Timeout = value
			case "--max-output":
				c.MaxOutput = value
			default:
				return g, c, false
			}
		}
	}
	return g, c, false
}
