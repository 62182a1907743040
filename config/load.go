package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/BurntSushi/toml"
)

// Loading the configuration: the file's keys read into their settings,
// with the line of each and a suggestion for a misspelt one.

// Load resolves every setting: defaults, then the file, the environment
// and the flags, each level overriding the one before.
func Load(o Options) (*Config, error) {
	if o.Getenv == nil {
		o.Getenv = os.LookupEnv
	}
	c := &Config{Settings: Defaults()}
	fields := c.fields()
	path, explicit := o.File, o.File != ""
	if !explicit {
		path, explicit = o.Getenv("HSBX_CONFIG")
		if !explicit || path == "" {
			path, explicit = DefaultPath(o.Getenv), false
		}
	}
	if path != "" {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			c.Path = path
			if err := loadFile(fields, path, string(b)); err != nil {
				return nil, err
			}
		case explicit || !errors.Is(err, os.ErrNotExist):
			return nil, &Error{Source: "config file " + path, Msg: fmt.Sprintf("%v (fix --config / HSBX_CONFIG, or create the file)", unwrapPath(err))}
		}
	}
	for _, f := range fields {
		for _, name := range f.env {
			raw, ok := o.Getenv(name)
			if !ok || (raw == "" && !f.emptyOK()) {
				continue
			}
			if err := f.set(raw, "env "+name); err != nil {
				return nil, &Error{Source: "env " + name, Msg: err.Error()}
			}
			break
		}
	}
	for _, fl := range o.Flags {
		f, ok := lookup(fields, fl.Key)
		if !ok {
			return nil, fmt.Errorf("config: unknown flag setting %q", fl.Key)
		}
		if err := f.set(fl.Value, "flag "+fl.Name); err != nil {
			return nil, &Error{Source: "flag " + fl.Name, Msg: err.Error()}
		}
	}
	return c, c.Validate()
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func lookup(fields []field, key string) (field, bool) {
	for _, f := range fields {
		if f.key == key {
			return f, true
		}
	}
	return field{}, false
}

// loadFile decodes the TOML file, rejecting unknown keys and wrong types
// with the file, line and key.
func loadFile(fields []field, path, text string) error {
	var raw map[string]any
	md, err := toml.Decode(text, &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return &Error{Source: fmt.Sprintf("file %s:%d", path, pe.Position.Line), Msg: pe.Message}
		}
		return &Error{Source: "file " + path, Msg: err.Error()}
	}
	lines := keyLines(text)
	src := func(key string) string {
		if l, ok := lines[key]; ok {
			return fmt.Sprintf("file %s:%d", path, l)
		}
		return "file " + path
	}
	for _, k := range md.Keys() {
		key := k.String()
		if _, ok := lookup(fields, key); ok || key == "sandbox" || key == "reaper" || key == "kubernetes" {
			continue
		}
		if strings.HasPrefix(key, "sandbox.env.") {
			continue // the keys of the env table are the user's
		}
		if strings.HasPrefix(key, "sandbox.secrets.") {
			continue // each entry's keys are checked when it is read
		}
		return &Error{Source: src(key), Key: key, Msg: "unknown key" + suggest(fields, key)}
	}
	for _, table := range []string{"sandbox", "reaper", "kubernetes"} {
		if v, ok := raw[table]; ok {
			if _, isTable := v.(map[string]any); !isTable {
				return &Error{Source: src(table), Key: table, Msg: "want a table ([" + table + "])"}
			}
		}
	}
	for _, f := range fields {
		v, ok := dig(raw, f.key)
		if !ok {
			continue
		}
		if err := f.setTOML(v, src(f.key)); err != nil {
			return &Error{Source: src(f.key), Key: f.key, Msg: err.Error()}
		}
	}
	return nil
}

func suggest(fields []field, key string) string {
	best, bestD := "", 4
	last := key[strings.LastIndexByte(key, '.')+1:]
	for _, f := range fields {
		d := editDistance(key, f.key)
		if leaf := f.key[strings.LastIndexByte(f.key, '.')+1:]; leaf == last && f.key != key {
			d = 0 // the right key in the wrong table
		}
		if d < bestD {
			best, bestD = f.key, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.key
	}
	return "; known keys: " + strings.Join(keys, ", ")
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func dig(raw map[string]any, key string) (any, bool) {
	var cur any = raw
	for _, part := range strings.Split(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// keyLines maps "table.key" to the line its assignment starts on.
func keyLines(text string) map[string]int {
	lines := map[string]int{}
	table := ""
	for i, line := range strings.Split(text, "\n") {
		l := strings.TrimSpace(line)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "[") && !strings.HasPrefix(l, "[[") {
			if end := strings.Index(l, "]"); end > 0 {
				table = strings.TrimSpace(l[1:end])
				lines[table] = i + 1
			}
			continue
		}
		if k, _, ok := strings.Cut(l, "="); ok {
			k = strings.Trim(strings.TrimSpace(k), `"'`)
			if table != "" {
				k = table + "." + k
			}
			if _, seen := lines[k]; !seen {
				lines[k] = i + 1
			}
		}
	}
	return lines
}
