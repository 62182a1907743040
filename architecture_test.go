package hsbx_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/hsbx/hsbx"

// mapRow is one row of a package table in docs/architecture.md.
type mapRow struct {
	pkgs    []string // import paths the row is about
	imports []string // import paths they may import
	ordered bool     // in the first table: imports must be rows below
	line    int
}

var backticked = regexp.MustCompile("`([^`]+)`")

// docPackage is a package named in the map: "hsbx" is the module's root.
func docPackage(name string) string {
	if name == "hsbx" {
		return modulePath
	}
	return modulePath + "/" + name
}

// readPackageMap parses the tables headed "| package | owns | imports |".
func readPackageMap(t *testing.T) []mapRow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []mapRow
	tables, inTable := 0, false
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "| package | owns | imports |"):
			tables++
			inTable = true
			continue
		case !strings.HasPrefix(line, "|"):
			inTable = false
			continue
		case !inTable || strings.HasPrefix(line, "|---"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("docs/architecture.md:%d: a package row has three cells: %q", i+1, line)
		}
		r := mapRow{ordered: tables == 1, line: i + 1}
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			r.pkgs = append(r.pkgs, docPackage(m[1]))
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
			r.imports = append(r.imports, docPackage(m[1]))
		}
		rows = append(rows, r)
	}
	if tables == 0 || len(rows) == 0 {
		t.Fatal("docs/architecture.md has no package table")
	}
	return rows
}

// moduleImports is every package of the module (by directory) with the
// module's packages its non-test files import, on any OS.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "docs") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := modulePath
		if dir := filepath.ToSlash(filepath.Dir(p)); dir != "." {
			pkg = path.Join(modulePath, dir)
		}
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			if (ip == modulePath || strings.HasPrefix(ip, modulePath+"/")) && !slices.Contains(out[pkg], ip) {
				out[pkg] = append(out[pkg], ip)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The architecture doc's package map is the code's: every package has a
// row, imports only what its row names (and the row names nothing it does
// not import), and in the first table imports point down.
func TestPackageMap(t *testing.T) {
	rows := readPackageMap(t)
	code := moduleImports(t)
	position := map[string]int{}
	for i, r := range rows {
		for _, p := range r.pkgs {
			if _, dup := position[p]; dup {
				t.Errorf("docs/architecture.md:%d: %s has two rows", r.line, p)
			}
			position[p] = i
		}
	}
	short := func(p string) string {
		if p == modulePath {
			return "hsbx"
		}
		return strings.TrimPrefix(p, modulePath+"/")
	}
	var pkgs []string
	for p := range code {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		i, ok := position[p]
		if !ok {
			t.Errorf("package %s has no row in docs/architecture.md's package map: add one", short(p))
			continue
		}
		r := rows[i]
		for _, imp := range code[p] {
			if !slices.Contains(r.imports, imp) {
				t.Errorf("%s imports %s, which its row in docs/architecture.md (line %d) does not name: add it there if it belongs, or move the code", short(p), short(imp), r.line)
			}
		}
	}
	for i, r := range rows {
		for _, imp := range r.imports {
			used := false
			for _, p := range r.pkgs {
				used = used || slices.Contains(code[p], imp)
			}
			if !used {
				t.Errorf("docs/architecture.md:%d names %s as an import, but no package of the row imports it: the map is stale", r.line, short(imp))
			}
			if j, ok := position[imp]; r.ordered && (!ok || j <= i || !rows[j].ordered) {
				t.Errorf("docs/architecture.md:%d: %s is imported from a row above it, not below: imports point down the table", r.line, short(imp))
			}
		}
		for _, p := range r.pkgs {
			if _, ok := code[p]; !ok {
				t.Errorf("docs/architecture.md:%d names %s, which is not a package", r.line, short(p))
			}
		}
	}
}
