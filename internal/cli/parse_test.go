package cli

import (
	"bytes"

	"github.com/alecthomas/kong"
	"reflect"
	"testing"
)

// The exec grammar is a shortcut, never a second meaning: every command
// line parses to the same globals, the same exec fields and the same
// success or failure as with the whole grammar (which then has the last
// word and its messages).
func TestExecGrammarAgreesWithTheWholeOne(t *testing.T) {
	for _, args := range [][]string{
		{"exec", "--", "true"},
		{"exec", "--task", "t1", "-w", "/tmp", "-e", "A=b,c=d", "-e", "B", "--timeout", "5", "-i", "--", "sh", "-c", "exit 3"},
		{"--profile", "exec", "exec", "--", "true"},
		{"--log-level", "debug", "--json", "--runtime", "podman", "--engine-timeout", "3s", "exec", "--", "ls", "--help"},
		{"exec", "--task", "t", "true", "--", "x"},
		{"exec"},
		{"exec", "--no-such-flag", "--", "true"},
		{"exec", "--help"},
		{"exec", "-h", "--", "true"},
		{"--version", "exec", "--", "true"},
		{"ls", "exec"},
		{"up", "--task", "exec"},
		{"exec", "-t", "--", "sh"},
	} {
		full, fullG, fullErr := parseWhole(args)
		var out bytes.Buffer
		code := -1
		kctx, g, err := parse(Env{Args: args, Stdout: &out, Stderr: &out}, &code)
		if (err == nil) != (fullErr == nil) {
			t.Errorf("%q: error %v, whole grammar %v", args, err, fullErr)
			continue
		}
		if err != nil || kctx == nil || full == nil {
			continue
		}
		if kctx.Command() != full.Command() {
			t.Errorf("%q: command %q, whole grammar %q", args, kctx.Command(), full.Command())
		}
		if !reflect.DeepEqual(*g, *fullG) {
			t.Errorf("%q: globals %+v, whole grammar %+v", args, *g, *fullG)
		}
		if full.Selected().Name == "exec" {
			got := kctx.Selected().Target.Interface()
			want := full.Selected().Target.Interface()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%q: exec %+v, whole grammar %+v", args, got, want)
			}
		}
	}
}

func parseWhole(args []string) (*kong.Context, *Globals, error) {
	var g grammar
	code := -1
	var out bytes.Buffer
	p, err := newParser(&g, Env{Stdout: &out, Stderr: &out}, &code)
	if err != nil {
		return nil, nil, err
	}
	k, err := p.Parse(args)
	return k, &g.Globals, err
}
