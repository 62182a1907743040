// Package config resolves hsbx's settings from four levels with one
// precedence everywhere: flag > environment > file > default. The file is
// TOML (BurntSushi/toml); the environment variables are the Hermes agent
// framework's TERMINAL_* names (so users carry settings across) plus
// hsbx's own. Every value remembers where it came from, for `hsbx config`.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/hsbx/hsbx/sandbox"
)

// kind is how a setting's value is written and parsed.
type kind int

const (
	kString kind = iota
	kBool
	kFloat
	kInt      // whole number (MB, count)
	kDuration // "300s"; plain numbers are seconds
	kStrings  // TOML array / JSON array of strings in env
	kStrMap   // TOML table / JSON object in env
)

func (k kind) want() string {
	return [...]string{"a string", "a boolean (true/1/yes or false/0/no)", "a number", "a whole number",
		`a duration like "300s" or a number of seconds`, "an array of strings", "a table of strings"}[k]
}

// setting describes one key.
type setting struct {
	key  string   // file key, dotted: "sandbox.image"
	env  []string // environment variables, first wins
	kind kind
	def  any
	help string
}

// settings is every key hsbx reads, in display order.
var settings = []setting{
	{key: "runtime", env: []string{"HSBX_RUNTIME", "HERMES_DOCKER_BINARY"}, kind: kString, def: "auto", help: "docker | podman | a path | auto"},
	{key: "profile", env: []string{"HSBX_PROFILE"}, kind: kString, def: "default"},
	{key: "sandbox.image", env: []string{"TERMINAL_DOCKER_IMAGE"}, kind: kString, def: sandbox.DefaultImage},
	{key: "sandbox.cwd", env: []string{"TERMINAL_CWD"}, kind: kString, def: "/root"},
	{key: "sandbox.volumes", env: []string{"TERMINAL_DOCKER_VOLUMES"}, kind: kStrings, def: []string{}},
	{key: "sandbox.env", env: []string{"TERMINAL_DOCKER_ENV"}, kind: kStrMap, def: map[string]string{}},
	{key: "sandbox.forward_env", env: []string{"TERMINAL_DOCKER_FORWARD_ENV"}, kind: kStrings, def: []string{}},
	{key: "sandbox.extra_args", env: []string{"TERMINAL_DOCKER_EXTRA_ARGS"}, kind: kStrings, def: []string{}},
	{key: "sandbox.cpu", env: []string{"TERMINAL_CONTAINER_CPU"}, kind: kFloat, def: 1.0},
	{key: "sandbox.memory", env: []string{"TERMINAL_CONTAINER_MEMORY"}, kind: kInt, def: int64(5120)},
	{key: "sandbox.disk", env: []string{"TERMINAL_CONTAINER_DISK"}, kind: kInt, def: int64(0)},
	{key: "sandbox.pids_limit", kind: kInt, def: int64(256)},
	{key: "sandbox.shm_size", env: []string{"TERMINAL_DOCKER_SHM_SIZE"}, kind: kString, def: "1g"},
	{key: "sandbox.network", env: []string{"TERMINAL_DOCKER_NETWORK"}, kind: kBool, def: true},
	{key: "sandbox.shared_container_key", env: []string{"TERMINAL_DOCKER_SHARED_CONTAINER_KEY"}, kind: kString, def: ""},
	{key: "sandbox.sandbox_dir", env: []string{"TERMINAL_SANDBOX_DIR"}, kind: kString, def: ""},
	{key: "sandbox.snap_compat", env: []string{"TERMINAL_DOCKER_SNAP_COMPAT"}, kind: kBool, def: false},
	{key: "sandbox.run_as_host_user", env: []string{"TERMINAL_DOCKER_RUN_AS_HOST_USER"}, kind: kBool, def: false},
	{key: "sandbox.mount_cwd_to_workspace", env: []string{"TERMINAL_DOCKER_MOUNT_CWD_TO_WORKSPACE"}, kind: kBool, def: false},
	{key: "sandbox.persistent", env: []string{"TERMINAL_CONTAINER_PERSISTENT"}, kind: kBool, def: true},
	{key: "sandbox.persist_across_processes", env: []string{"TERMINAL_DOCKER_PERSIST_ACROSS_PROCESSES"}, kind: kBool, def: true},
	{key: "sandbox.timeout", env: []string{"TERMINAL_TIMEOUT"}, kind: kDuration, def: time.Duration(0)},
	{key: "reaper.orphan_reaper", env: []string{"TERMINAL_DOCKER_ORPHAN_REAPER"}, kind: kBool, def: true},
	{key: "reaper.lifetime", env: []string{"TERMINAL_LIFETIME_SECONDS"}, kind: kDuration, def: 300 * time.Second},
	{key: "reaper.idle_after", kind: kDuration, def: time.Duration(0)},
}

// Value is a resolved setting and where it came from: "default",
// "file PATH:LINE", "env NAME" or "flag --NAME".
type Value struct {
	V      any    `json:"value"`
	Source string `json:"source"`
}

// Config is the resolved configuration.
type Config struct {
	Path   string // the file in use ("" when none)
	values map[string]Value
}

// Options say where to read from.
type Options struct {
	// File is --config / HSBX_CONFIG ("" = the default path).
	File string
	// Getenv reads the environment.
	Getenv func(string) (string, bool)
	// Flags are the settings given on the command line, by key, in their
	// string form, with the flag's name for the source: key -> [value, "--image"].
	Flags map[string][2]string
}

// Error is a configuration error: it names the source and the fix. hsbx
// exits 2 on it before any engine call.
type Error struct {
	Source string // "file PATH:LINE", "env NAME", "flag --x"
	Key    string
	Msg    string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s: %s", e.Source, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.Source, e.Key, e.Msg)
}

// Hint says where to fix the value.
func (e *Error) Hint() string {
	switch {
	case strings.HasPrefix(e.Source, "env "):
		return fmt.Sprintf("fix or unset %s in your environment (`hsbx config` shows every setting and its source)", strings.TrimPrefix(e.Source, "env "))
	case strings.HasPrefix(e.Source, "flag "):
		return fmt.Sprintf("fix the value of %s (`hsbx --help` lists the flags)", strings.TrimPrefix(e.Source, "flag "))
	case strings.HasPrefix(e.Source, "file "), strings.HasPrefix(e.Source, "config file "):
		return "fix the configuration file there (the README's Configuration section lists every key), or point --config / HSBX_CONFIG elsewhere"
	}
	return "see `hsbx config` and the README's Configuration section"
}

// DefaultPath is $XDG_CONFIG_HOME/hsbx/config.toml (or ~/.config/...).
func DefaultPath(getenv func(string) (string, bool)) string {
	if d, ok := getenv("XDG_CONFIG_HOME"); ok && d != "" {
		return filepath.Join(d, "hsbx", "config.toml")
	}
	if h, ok := getenv("HOME"); ok && h != "" {
		return filepath.Join(h, ".config", "hsbx", "config.toml")
	}
	return ""
}

// Load resolves every setting.
func Load(o Options) (*Config, error) {
	if o.Getenv == nil {
		o.Getenv = func(string) (string, bool) { return "", false }
	}
	c := &Config{values: map[string]Value{}}
	for _, s := range settings {
		c.values[s.key] = Value{V: s.def, Source: "default"}
	}
	path, explicit := o.File, o.File != ""
	if !explicit {
		path = DefaultPath(o.Getenv)
	}
	if path != "" {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			c.Path = path
			if err := c.loadFile(path, string(b)); err != nil {
				return nil, err
			}
		case explicit || !errors.Is(err, os.ErrNotExist):
			return nil, &Error{Source: "config file " + path, Msg: fmt.Sprintf("%v (fix --config / HSBX_CONFIG, or create the file)", unwrapPath(err))}
		}
	}
	for _, s := range settings {
		for _, name := range s.env {
			raw, ok := o.Getenv(name)
			if !ok || (raw == "" && s.kind != kString) {
				continue
			}
			v, err := parseString(s, raw, true)
			if err != nil {
				return nil, &Error{Source: "env " + name, Msg: err.Error()}
			}
			c.values[s.key] = Value{V: v, Source: "env " + name}
			break
		}
	}
	for key, f := range o.Flags {
		s, ok := lookup(key)
		if !ok {
			return nil, fmt.Errorf("config: unknown flag setting %q", key)
		}
		v, err := parseString(s, f[0], false)
		if err != nil {
			return nil, &Error{Source: "flag " + f[1], Msg: err.Error()}
		}
		c.values[key] = Value{V: v, Source: "flag " + f[1]}
	}
	return c, c.validate()
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func lookup(key string) (setting, bool) {
	for _, s := range settings {
		if s.key == key {
			return s, true
		}
	}
	return setting{}, false
}

// loadFile decodes the TOML file, rejecting unknown keys and wrong types
// with the file, line and key.
func (c *Config) loadFile(path, text string) error {
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
		if _, ok := lookup(key); ok || key == "sandbox" || key == "reaper" {
			continue
		}
		if strings.HasPrefix(key, "sandbox.env.") {
			continue // the keys of the env table are the user's
		}
		return &Error{Source: src(key), Key: key, Msg: "unknown key" + suggest(key)}
	}
	for _, s := range settings {
		v, ok := dig(raw, s.key)
		if !ok {
			continue
		}
		parsed, err := fromTOML(s, v)
		if err != nil {
			return &Error{Source: src(s.key), Key: s.key, Msg: err.Error()}
		}
		c.values[s.key] = Value{V: parsed, Source: src(s.key)}
	}
	for _, table := range []string{"sandbox", "reaper"} {
		if v, ok := raw[table]; ok {
			if _, isTable := v.(map[string]any); !isTable {
				return &Error{Source: src(table), Key: table, Msg: "want a table ([" + table + "])"}
			}
		}
	}
	return nil
}

func suggest(key string) string {
	best, bestD := "", 4
	last := key[strings.LastIndexByte(key, '.')+1:]
	for _, s := range settings {
		d := editDistance(key, s.key)
		if leaf := s.key[strings.LastIndexByte(s.key, '.')+1:]; leaf == last && s.key != key {
			d = 0 // the right key in the wrong table
		}
		if d < bestD {
			best, bestD = s.key, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	keys := make([]string, len(settings))
	for i, s := range settings {
		keys[i] = s.key
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

// fromTOML checks and converts a decoded TOML value.
func fromTOML(s setting, v any) (any, error) {
	bad := func() (any, error) { return nil, fmt.Errorf("want %s, got %s", s.kind.want(), tomlType(v)) }
	switch s.kind {
	case kString:
		if str, ok := v.(string); ok {
			return str, nil
		}
	case kBool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case kFloat:
		switch n := v.(type) {
		case float64:
			return n, nil
		case int64:
			return float64(n), nil
		}
	case kInt:
		switch n := v.(type) {
		case int64:
			return n, nil
		case float64:
			if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
				return int64(n), nil
			}
		}
	case kDuration:
		switch n := v.(type) {
		case string:
			return parseDuration(n)
		case int64:
			return time.Duration(n) * time.Second, nil
		case float64:
			return time.Duration(n * float64(time.Second)), nil
		}
	case kStrings:
		arr, ok := v.([]any)
		if !ok {
			return bad()
		}
		out := make([]string, 0, len(arr))
		for i, e := range arr {
			str, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("element %d: want a string, got %s", i, tomlType(e))
			}
			out = append(out, str)
		}
		return out, nil
	case kStrMap:
		m, ok := v.(map[string]any)
		if !ok {
			return bad()
		}
		return stringMap(m)
	}
	return bad()
}

func stringMap(m map[string]any) (map[string]string, error) {
	out := map[string]string{}
	for k, e := range m {
		switch x := e.(type) {
		case string:
			out[k] = x
		case bool, int64, float64:
			out[k] = fmt.Sprint(x)
		default:
			return nil, fmt.Errorf("value of %q: want a string, number or boolean, got %s", k, tomlType(e))
		}
	}
	return out, nil
}

func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date"
	}
	return fmt.Sprintf("%T", v)
}

// parseString parses an environment or flag value. Environment values of
// list and map settings are JSON, as the Hermes backend reads them — but a
// JSON value of the wrong type is an error, not a string iterated into
// single letters.
func parseString(s setting, raw string, fromEnv bool) (any, error) {
	switch s.kind {
	case kString:
		return raw, nil
	case kBool:
		switch strings.ToLower(strings.TrimSpace(raw)) {
		case "true", "1", "yes":
			return true, nil
		case "false", "0", "no":
			return false, nil
		}
		return nil, fmt.Errorf("%q: want true/1/yes or false/0/no", raw)
	case kFloat:
		f, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%q: want a number", raw)
		}
		return f, nil
	case kInt:
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q: want a whole number", raw)
		}
		return n, nil
	case kDuration:
		return parseDuration(raw)
	case kStrings:
		var v any
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			return nil, fmt.Errorf("%q: want a JSON array of strings: %v", raw, err)
		}
		arr, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%q: want a JSON array of strings, got %s", raw, jsonType(v))
		}
		out := make([]string, 0, len(arr))
		for i, e := range arr {
			str, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%q: element %d: want a string, got %s", raw, i, jsonType(e))
			}
			out = append(out, str)
		}
		return out, nil
	case kStrMap:
		var v any
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			return nil, fmt.Errorf("%q: want a JSON object: %v", raw, err)
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%q: want a JSON object, got %s", raw, jsonType(v))
		}
		out := map[string]string{}
		for k, e := range m {
			switch x := e.(type) {
			case string:
				out[k] = x
			case bool, float64:
				out[k] = fmt.Sprint(x)
			default:
				return nil, fmt.Errorf("%q: value of %q: want a string, number or boolean, got %s", raw, k, jsonType(e))
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported setting kind")
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// ParseDuration reads a duration the way every hsbx setting and flag
// takes one: "300s", "5m", "1h30m", or a plain number of seconds ("5",
// "0.5"). Negative values are refused.
func ParseDuration(raw string) (time.Duration, error) { return parseDuration(raw) }

func parseDuration(raw string) (time.Duration, error) {
	raw = strings.TrimSpace(raw)
	if n, err := strconv.ParseFloat(raw, 64); err == nil && !math.IsNaN(n) && !math.IsInf(n, 0) {
		if n < 0 {
			return 0, fmt.Errorf("%q: want a duration >= 0", raw)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: want a duration like 300s or 5m, or a number of seconds", raw)
	}
	return d, nil
}

// validate checks cross-field rules and values the sandbox would reject,
// so every configuration error surfaces before any engine call.
func (c *Config) validate() error {
	spec := c.Spec()
	if err := spec.Validate(); err != nil {
		var bs *sandbox.SpecError
		if errors.As(err, &bs) {
			key := "sandbox." + bs.Setting
			return &Error{Source: c.values[key].Source, Key: key, Msg: bs.Msg}
		}
		return err
	}
	if p := c.String("profile"); strings.TrimSpace(p) == "" {
		return &Error{Source: c.values["profile"].Source, Key: "profile", Msg: "empty; name a profile"}
	}
	return nil
}

// Get returns a setting's value and source.
func (c *Config) Get(key string) Value { return c.values[key] }

// String returns a string setting.
func (c *Config) String(key string) string { s, _ := c.values[key].V.(string); return s }

// Bool returns a boolean setting.
func (c *Config) Bool(key string) bool { b, _ := c.values[key].V.(bool); return b }

// Duration returns a duration setting.
func (c *Config) Duration(key string) time.Duration {
	d, _ := c.values[key].V.(time.Duration)
	return d
}

// Explicit reports whether the user set key (anything but the default).
func (c *Config) Explicit(key string) bool { return c.values[key].Source != "default" }

// Spec is the sandbox specification the settings describe.
func (c *Config) Spec() sandbox.Spec {
	v := func(k string) any { return c.values["sandbox."+k].V }
	cwd := v("cwd").(string)
	if cwd == "~" {
		cwd = "/root"
	}
	s := sandbox.Spec{
		Image: v("image").(string), Cwd: cwd,
		Volumes: v("volumes").([]string), Env: v("env").(map[string]string),
		ForwardEnv: v("forward_env").([]string), ExtraArgs: v("extra_args").([]string),
		CPU: v("cpu").(float64), MemoryMB: v("memory").(int64), DiskMB: v("disk").(int64),
		PidsLimit: v("pids_limit").(int64), ShmSize: v("shm_size").(string), Network: v("network").(bool),
		RunAsHostUser: v("run_as_host_user").(bool), MountCwdToWorkspace: v("mount_cwd_to_workspace").(bool),
		Persistent: v("persistent").(bool), PersistAcrossProcesses: v("persist_across_processes").(bool),
		SandboxDir: v("sandbox_dir").(string), SnapCompat: v("snap_compat").(bool),
		Explicit: map[string]bool{},
	}
	if s.ShmSize == "0" {
		s.ShmSize = "" // Hermes: "0" (or empty) leaves the engine's default
	}
	for _, st := range settings {
		if name, ok := strings.CutPrefix(st.key, "sandbox."); ok && c.Explicit(st.key) {
			s.Explicit[name] = true
		}
	}
	return s
}

// All returns every setting by key, for `hsbx config`. Durations are
// rendered as strings ("300s").
func (c *Config) All() ([]string, map[string]Value) {
	keys := make([]string, 0, len(settings))
	out := map[string]Value{}
	for _, s := range settings {
		keys = append(keys, s.key)
		val := c.values[s.key]
		if d, ok := val.V.(time.Duration); ok {
			val.V = d.String()
		}
		out[s.key] = val
	}
	return keys, out
}

// Keys lists the known keys, sorted.
func Keys() []string {
	ks := make([]string, len(settings))
	for i, s := range settings {
		ks[i] = s.key
	}
	sort.Strings(ks)
	return ks
}

// HermesIgnored are the Hermes TERMINAL_* variables hsbx reads but does not
// act on, with why. `hsbx config` warns about each one that is set.
var HermesIgnored = []struct{ Name, Why string }{
	{"TERMINAL_PERSISTENT_SHELL", "hsbx has no persistent shell: each `hsbx exec` runs its command afresh (state lives in the sandbox's files)"},
	{"TERMINAL_ENV", "hsbx is the docker/podman backend only; other Hermes backends are not hsbx's (\"docker\" is the only value that matches it)"},
	{"TERMINAL_SSH_HOST", "the ssh backend is not hsbx's"},
	{"TERMINAL_SSH_USER", "the ssh backend is not hsbx's"},
	{"TERMINAL_SSH_PORT", "the ssh backend is not hsbx's"},
	{"TERMINAL_SSH_KEY", "the ssh backend is not hsbx's"},
	{"TERMINAL_MODAL_IMAGE", "the modal backend is not hsbx's"},
	{"TERMINAL_SINGULARITY_IMAGE", "the singularity backend is not hsbx's"},
	{"TERMINAL_DAYTONA_IMAGE", "the daytona backend is not hsbx's"},
	{"TERMINAL_VERCEL_RUNTIME", "the vercel backend is not hsbx's"},
}

// Warnings lists the Hermes variables that are set in the environment but
// that hsbx ignores, one line each.
func Warnings(getenv func(string) (string, bool)) []string {
	var out []string
	for _, h := range HermesIgnored {
		v, ok := getenv(h.Name)
		if !ok || v == "" || (h.Name == "TERMINAL_ENV" && v == "docker") {
			continue
		}
		out = append(out, fmt.Sprintf("%s is set but ignored: %s", h.Name, h.Why))
	}
	return out
}

// SharedKey is sandbox.shared_container_key ("" when unset).
func (c *Config) SharedKey() string { return c.String("sandbox.shared_container_key") }
