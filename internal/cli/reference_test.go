package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// reference renders docs/cli.md from the command model: for every command
// kong knows (hidden ones left out), the help `hsbx CMD --help` prints.
func reference(t *testing.T) string {
	t.Helper()
	t.Setenv("COLUMNS", "100") // kong wraps help to it
	var g grammar
	code := -1
	p, err := newParser(&g, Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}, &code)
	if err != nil {
		t.Fatal(err)
	}
	help := func(path ...string) string {
		var out bytes.Buffer
		env := Env{Args: append(path, "--help"), Stdout: &out, Stderr: &out}
		if code := Main(context.Background(), env); code != 0 {
			t.Fatalf("hsbx %s --help: exit %d: %s", strings.Join(path, " "), code, out.String())
		}
		return strings.TrimRight(out.String(), "\n")
	}
	var b strings.Builder
	b.WriteString("# Command-line reference\n\n")
	b.WriteString("<!-- Generated from the command model by `make docs`; TestCLIReferenceIsFresh fails when it is stale. Do not edit. -->\n\n")
	b.WriteString("Every command and flag, as `--help` prints them. What the commands do in\n")
	b.WriteString("detail is in [commands.md](commands.md), the settings behind the flags in\n")
	b.WriteString("[configuration.md](configuration.md).\n\n")
	var cmds []*kong.Node
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, c := range n.Children {
			if c.Hidden || c.Type != kong.CommandNode {
				continue
			}
			if len(c.Children) == 0 || c.DefaultCmd != nil {
				cmds = append(cmds, c)
			}
			walk(c)
		}
	}
	walk(p.Model.Node)
	b.WriteString("| command | |\n|---|---|\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "| [`hsbx %s`](#hsbx-%s) | %s |\n", c.Path(), strings.ReplaceAll(c.Path(), " ", "-"), strings.ReplaceAll(c.Help, "|", `\|`))
	}
	b.WriteString("\n## hsbx\n\nThe global flags, which every command takes.\n\n```text\n" + help() + "\n```\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "\n## hsbx %s\n\n```text\n%s\n```\n", c.Path(), help(strings.Fields(c.Path())...))
	}
	return b.String()
}

// docs/cli.md is what the command model says today. Regenerate it with
// `make docs` (HSBX_UPDATE_DOCS=1 go test ./internal/cli -run TestCLIReferenceIsFresh).
func TestCLIReferenceIsFresh(t *testing.T) {
	want := reference(t)
	path := filepath.Join("..", "..", "docs", "cli.md")
	if os.Getenv("HSBX_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("docs/cli.md is stale: run make docs (the command model changed)")
	}
}
