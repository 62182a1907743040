package hsbx_test

import (
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// The agent-session example is a program written against the public API:
// it must not import hsbx's internal packages (which a program outside
// this module cannot).
func TestExamplesUsePublicAPIOnly(t *testing.T) {
	for _, file := range []string{"example_test.go", "example_agent_test.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(p, "/internal/") || strings.HasSuffix(p, "/internal") {
				t.Errorf("%s imports %s, which programs outside the module cannot", file, p)
			}
		}
	}
}
