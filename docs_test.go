package hsbx_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docFiles are the documents a user reads: the README, docs/ and the
// project's own pages at the root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "SECURITY.md", "CONTRIBUTING.md", "CHANGELOG.md", "BENCHMARKS.md"}
	more, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil || len(more) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	return append(files, more...)
}

// The README is read in five minutes: what hsbx is, the set-up, a quick
// start, the commands and the index of docs/.
func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 250 {
		t.Errorf("README.md has %d lines; keep it to 250 and move the rest to docs/", n)
	}
	for _, f := range docFiles(t)[1:] {
		if strings.HasPrefix(f, "docs") && !strings.Contains(string(b), "("+filepath.ToSlash(f)+")") {
			t.Errorf("README.md's index does not link %s", f)
		}
	}
}

// The README's Go example is ExampleOpen's quickStart, line for line, so
// go test runs what the README shows.
func TestReadmeGoExampleIsRun(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- readme-go-example -->\n```go\n")
	if !ok {
		t.Fatal("README.md has no go block after <!-- readme-go-example -->")
	}
	block, _, _ := strings.Cut(after, "```\n")
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, _ := strings.Cut(string(src), "\t// readme-go-example begins\n")
	body, _, ok = strings.Cut(body, "\t// readme-go-example ends\n")
	if !ok {
		t.Fatal("example_test.go has no readme-go-example markers")
	}
	var lines []string
	for _, l := range strings.SplitAfter(body, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	if got := strings.Join(lines, ""); got != block {
		t.Errorf("README.md's Go example differs from quickStart in example_test.go:\nREADME:\n%s\nexample_test.go:\n%s", block, got)
	}
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#+ (.+)$`)
	slugDrop  = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// anchors are a markdown file's heading anchors, as GitHub makes them.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	for _, m := range mdHeading.FindAllStringSubmatch(doc, -1) {
		s := strings.ToLower(slugDrop.ReplaceAllString(m[1], ""))
		out[strings.ReplaceAll(s, " ", "-")] = true
	}
	return out
}

// Every relative link in the docs reaches a file, and every #anchor a
// heading of it: moving a section cannot leave a dead link behind.
func TestDocLinksResolve(t *testing.T) {
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			p := f
			if file != "" {
				p = filepath.Join(filepath.Dir(f), filepath.FromSlash(file))
			}
			tb, err := os.ReadFile(p)
			if err != nil {
				if st, serr := os.Stat(p); serr == nil && st.IsDir() && anchor == "" {
					continue
				}
				t.Errorf("%s links %s: %v", f, target, err)
				continue
			}
			if anchor != "" && !anchors(string(tb))[anchor] {
				t.Errorf("%s links %s: %s has no heading with that anchor", f, target, p)
			}
		}
	}
}
