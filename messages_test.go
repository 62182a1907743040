package hsbx_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// messageMax bounds a message's text as written (before its values are
// put in): one sentence of cause and one of fix, read at a glance.
const messageMax = 160

// The messages hsbx writes — errors, warnings, what fmt.Sprintf builds for
// them — stay short: a longer explanation belongs in a hint or in docs/.
// (The third review counted 30 over 160 characters.)
func TestMessagesAreShort(t *testing.T) {
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "fakebin" || d.Name() == "bench" || d.Name() == "scripts") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			name := ""
			switch fn := call.Fun.(type) {
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			case *ast.Ident:
				name = fn.Name
			}
			switch name {
			case "Errorf", "New", "Warn", "warn", "Sprintf":
			default:
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(lit.Value)
			if err == nil && !strings.Contains(v, "\n") && len(v) > messageMax {
				t.Errorf("%s: a message of %d characters (at most %d): %.60s...; move the explanation to a hint or docs/", fset.Position(lit.Pos()), len(v), messageMax, v)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
