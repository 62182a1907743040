package cli

import (
	"io"
	"reflect"
	"strings"
	"testing"
)

// kongExec parses args with exec's kong grammar, as parse does first.
func kongExec(args []string) (Globals, ExecCmd, bool) {
	var g execGrammar
	quiet := -1
	p, err := newParser(&g, Env{Stdout: io.Discard, Stderr: io.Discard}, &quiet)
	if err != nil {
		panic(err)
	}
	kctx, err := p.Parse(args)
	if err != nil || quiet >= 0 || kctx.Selected() == nil || kctx.Selected().Name != "exec" {
		return Globals{}, ExecCmd{}, false
	}
	c := g.Exec
	if len(c.Cmd) > 0 && c.Cmd[0] == "--" {
		c.Cmd = c.Cmd[1:]
	}
	if c.Cmd == nil {
		c.Cmd = []string{}
	}
	return g.Globals, c, true
}

// agree checks that whatever fastExec takes, kong takes the same way.
func agree(t *testing.T, args []string) bool {
	t.Helper()
	fg, fc, ok := fastExec(args)
	if !ok {
		return false
	}
	kg, kc, kok := kongExec(args)
	if !kok {
		t.Fatalf("fastExec took %q, kong refuses it", args)
	}
	if fc.Cmd == nil {
		fc.Cmd = []string{}
	}
	// kong makes every argument valid UTF-8, byte by byte (U+FFFD); so do
	// the engines and the channel's JSON, so no path keeps other bytes.
	v := func(s string) string { return string([]rune(s)) }
	fg.Runtime, fg.Config, fg.LogLevel, fg.EngineTimeout, fg.KubeContext, fg.KubeNamespace = v(fg.Runtime), v(fg.Config), v(fg.LogLevel), v(fg.EngineTimeout), v(fg.KubeContext), v(fg.KubeNamespace)
	fg.Profile.Value, fc.Task.Value, fc.Workdir, fc.Timeout, fc.MaxOutput = v(fg.Profile.Value), v(fc.Task.Value), v(fc.Workdir), v(fc.Timeout), v(fc.MaxOutput)
	for i := range fc.Env {
		fc.Env[i] = v(fc.Env[i])
	}
	for i := range fc.Cmd {
		fc.Cmd[i] = v(fc.Cmd[i])
	}
	if !reflect.DeepEqual(fg, kg) || !reflect.DeepEqual(fc, kc) {
		t.Fatalf("%q:\n fast %+v %+v\n kong %+v %+v", args, fg, fc, kg, kc)
	}
	return true
}

func TestFastExecAgreesWithKong(t *testing.T) {
	for _, c := range []struct {
		line string
		fast bool
	}{
		{"exec -- true", true},
		{"exec -- sh -c 'x'", true},
		{"exec --task t1 -- true", true},
		{"exec --task=t1 -i -w /tmp -e A=b,c=d -e B --timeout 5s -- cat", true},
		{"--runtime podman --profile p exec --task t -- true", true},
		{"--json exec -- true", true},
		{"--json exec --max-output 64k -- true", true},
		{"exec --json --max-output=10 -- true", true},
		{"exec --json -t --interactive --tty -- x", true},
		{"exec --env=K=V=W --workdir=/w -- x --task y -- z", true},
		{"--log-level debug --engine-timeout 30s --config /c exec --kube-context k --kube-namespace n -- x", true},
		{"exec --task t --task u -- x", true},
		{"exec --", true},
		// left to kong
		{"exec true", false},
		{"exec -it -- x", false},
		{"exec -e=K=V -- x", false},
		{"exec --task -- x", false},
		{"exec --task '' -- x", false},
		{"exec --task -x -- x", false},
		{"-i exec -- x", false},
		{"--task t exec -- x", false},
		{"exec --help -- x", false},
		{"--version exec -- x", false},
		{"exec --nope -- x", false},
		{"exec -i=1 -- x", false},
		{"exec exec -- x", false},
		{"up -- x", false},
		{"-- exec x", false},
		{"exec --task", false},
	} {
		args := splitLine(c.line)
		if got := agree(t, args); got != c.fast {
			t.Errorf("%q: fast %v, want %v", c.line, got, c.fast)
		}
	}
}

// splitLine splits on spaces, with '...' for one word (possibly empty).
func splitLine(s string) []string {
	var out []string
	for len(s) > 0 {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			break
		}
		if s[0] == '\'' {
			end := strings.IndexByte(s[1:], '\'')
			out = append(out, s[1:end+1])
			s = s[end+2:]
			continue
		}
		w, rest, _ := strings.Cut(s, " ")
		out = append(out, w)
		s = rest
	}
	return out
}

func FuzzFastExec(f *testing.F) {
	for _, s := range []string{"exec\x00--\x00true", "--runtime\x00podman\x00exec\x00--task=t\x00-e\x00A=b\x00--\x00x", "exec\x00-i\x00-t\x00--json\x00--\x00a\x00--\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		if len(args) > 40 {
			return
		}
		agree(t, args)
	})
}

// kongRun parses args with the whole grammar, as parse does for run.
func kongRun(args []string) (Globals, RunCmd, bool) {
	var g grammar
	quiet := -1
	p, err := newParser(&g, Env{Stdout: io.Discard, Stderr: io.Discard}, &quiet)
	if err != nil {
		panic(err)
	}
	kctx, err := p.Parse(args)
	if err != nil || quiet >= 0 || kctx.Selected() == nil || kctx.Selected().Name != "run" {
		return Globals{}, RunCmd{}, false
	}
	c := g.Run
	if len(c.Text) > 0 && c.Text[0] == "--" {
		c.Text = c.Text[1:]
	}
	if c.Text == nil {
		c.Text = []string{}
	}
	return g.Globals, c, true
}

// agreeRun checks that whatever fastRun takes, kong takes the same way.
func agreeRun(t *testing.T, args []string) bool {
	t.Helper()
	fg, fc, ok := fastRun(args)
	if !ok {
		return false
	}
	kg, kc, kok := kongRun(args)
	if !kok {
		t.Fatalf("fastRun took %q, kong refuses it", args)
	}
	if fc.Text == nil {
		fc.Text = []string{}
	}
	v := func(s string) string { return string([]rune(s)) }
	fg.Runtime, fg.Config, fg.LogLevel, fg.EngineTimeout, fg.KubeContext, fg.KubeNamespace = v(fg.Runtime), v(fg.Config), v(fg.LogLevel), v(fg.EngineTimeout), v(fg.KubeContext), v(fg.KubeNamespace)
	fg.Profile.Value, fc.Task.Value, fc.Session, fc.Timeout, fc.MaxOutput = v(fg.Profile.Value), v(fc.Task.Value), v(fc.Session), v(fc.Timeout), v(fc.MaxOutput)
	for i := range fc.Text {
		fc.Text[i] = v(fc.Text[i])
	}
	if !reflect.DeepEqual(fg, kg) || !reflect.DeepEqual(fc, kc) {
		t.Fatalf("%q:\n fast %+v %+v\n kong %+v %+v", args, fg, fc, kg, kc)
	}
	return true
}

func TestFastRunAgreesWithKong(t *testing.T) {
	for _, c := range []struct {
		line string
		fast bool
	}{
		{"run -- 'cd /tmp'", true},
		{"run -- echo a b", true},
		{"run --task t -s s1 --timeout 5s -i --max-output 4k -- 'x; y'", true},
		{"--json --profile p run --session=s --task=t -- x", true},
		{"run --json -- x -- y", true},
		{"run --", true},
		// left to kong
		{"run x", false},
		{"run -is s -- x", false},
		{"run -t -- x", false},
		{"run -w /tmp -- x", false},
		{"run --session -- x", false},
		{"run --session '' -- x", false},
		{"--session s run -- x", false},
		{"run --help -- x", false},
		{"exec -- x", false},
		{"run run -- x", false},
	} {
		if got := agreeRun(t, splitLine(c.line)); got != c.fast {
			t.Errorf("%q: fast %v, want %v", c.line, got, c.fast)
		}
	}
}

func FuzzFastRun(f *testing.F) {
	for _, s := range []string{"run\x00--\x00true", "--runtime\x00podman\x00run\x00--task=t\x00-s\x00a\x00--\x00x", "run\x00-i\x00--json\x00--\x00a\x00--\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		if len(args) > 40 {
			return
		}
		agreeRun(t, args)
	})
}
