package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hsbx/hsbx/sandbox"
)

// A field's typed setting is reached through these few type switches, the
// only place that turns raw text or TOML into a setting's type.

// anySetting is what every Setting[T] offers without its type.
type anySetting interface {
	source() string
	value() any
}

func (s *Setting[T]) source() string { return s.Source }
func (s *Setting[T]) value() any     { return s.Value }

// source is where the field's value came from.
func (f field) source() string { return f.ptr.(anySetting).source() }

// value is the field's value.
func (f field) value() any { return f.ptr.(anySetting).value() }

// emptyOK: an empty environment value is a value (strings), not "unset".
func (f field) emptyOK() bool {
	_, ok := f.ptr.(*Setting[string])
	return ok && !f.network || f.paths
}

// want says what the field takes, for error messages.
func (f field) want() string {
	switch f.ptr.(type) {
	case *Setting[string]:
		if f.network {
			return "on, off or allow (true/1/yes for on, false/0/no for off)"
		}
		if f.enum != nil {
			return "one of " + strings.Join(f.enum, ", ")
		}
		return "a string"
	case *Setting[bool]:
		return "a boolean (true/1/yes or false/0/no)"
	case *Setting[float64]:
		return "a number"
	case *Setting[int64]:
		return "a whole number"
	case *Setting[time.Duration]:
		return `a duration like "300s" or a number of seconds`
	case *Setting[[]string]:
		return "an array of strings"
	case *Setting[[]Secret]:
		return "an array of secrets, each {name, hosts, env or file, header}"
	}
	return "a table of strings"
}

// set sets the field from an environment or flag value: lists and maps are
// JSON, as the Hermes backend reads them (a JSON value of the wrong type is
// an error, not a string iterated into single letters); a path list is
// colon-separated.
func (f field) set(raw, source string) error {
	switch p := f.ptr.(type) {
	case *Setting[string]:
		if f.network {
			v, err := parseNetwork(raw)
			if err != nil {
				return err
			}
			*p = Setting[string]{v, source}
			return nil
		}
		if f.enum != nil && !slices.Contains(f.enum, raw) {
			return fmt.Errorf("%q: want %s", raw, f.want())
		}
		*p = Setting[string]{raw, source}
	case *Setting[bool]:
		b, err := parseBool(raw)
		if err != nil {
			return err
		}
		*p = Setting[bool]{b, source}
	case *Setting[float64]:
		n, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
			return fmt.Errorf("%q: want a number", raw)
		}
		*p = Setting[float64]{n, source}
	case *Setting[int64]:
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil {
			return fmt.Errorf("%q: want a whole number", raw)
		}
		*p = Setting[int64]{n, source}
	case *Setting[time.Duration]:
		d, err := ParseDuration(raw)
		if err != nil {
			return err
		}
		*p = Setting[time.Duration]{d, source}
	case *Setting[[]string]:
		if f.paths {
			list := filepath.SplitList(raw)
			if list == nil {
				list = []string{}
			}
			*p = Setting[[]string]{list, source}
			return nil
		}
		list, err := jsonStrings(raw)
		if err != nil {
			return err
		}
		*p = Setting[[]string]{list, source}
	case *Setting[map[string]string]:
		m, err := jsonStringMap(raw)
		if err != nil {
			return err
		}
		*p = Setting[map[string]string]{m, source}
	case *Setting[[]Secret]:
		list, err := decodeSecrets([]byte(raw))
		if err != nil {
			return fmt.Errorf("want a JSON array of secrets ({\"name\", \"hosts\", \"env\" or \"file\", \"header\"}): %v", err)
		}
		*p = Setting[[]Secret]{list, source}
	default:
		panic(fmt.Sprintf("config: field %s has an unknown type %T", f.key, f.ptr))
	}
	return nil
}

// setTOML sets the field from a decoded TOML value.
func (f field) setTOML(v any, source string) error {
	bad := func() error { return fmt.Errorf("want %s, got %s", f.want(), tomlType(v)) }
	switch p := f.ptr.(type) {
	case *Setting[string]:
		str, ok := v.(string)
		if b, isBool := v.(bool); isBool && f.network {
			str, ok = strconv.FormatBool(b), true
		}
		if !ok {
			return bad()
		}
		return f.set(str, source)
	case *Setting[bool]:
		b, ok := v.(bool)
		if !ok {
			return bad()
		}
		*p = Setting[bool]{b, source}
	case *Setting[float64]:
		switch n := v.(type) {
		case float64:
			*p = Setting[float64]{n, source}
		case int64:
			*p = Setting[float64]{float64(n), source}
		default:
			return bad()
		}
	case *Setting[int64]:
		switch n := v.(type) {
		case int64:
			*p = Setting[int64]{n, source}
		case float64:
			if n != math.Trunc(n) || math.Abs(n) >= 1<<53 {
				return bad()
			}
			*p = Setting[int64]{int64(n), source}
		default:
			return bad()
		}
	case *Setting[time.Duration]:
		switch n := v.(type) {
		case string:
			return f.set(n, source)
		case int64:
			if n < 0 {
				return fmt.Errorf("%d: want a duration >= 0", n)
			}
			*p = Setting[time.Duration]{time.Duration(n) * time.Second, source}
		case float64:
			if n < 0 || math.IsNaN(n) || math.IsInf(n, 0) {
				return fmt.Errorf("%v: want a duration >= 0", n)
			}
			*p = Setting[time.Duration]{time.Duration(n * float64(time.Second)), source}
		default:
			return bad()
		}
	case *Setting[[]string]:
		arr, ok := v.([]any)
		if !ok {
			return bad()
		}
		out := make([]string, 0, len(arr))
		for i, e := range arr {
			str, ok := e.(string)
			if !ok {
				return fmt.Errorf("element %d: want a string, got %s", i, tomlType(e))
			}
			out = append(out, str)
		}
		*p = Setting[[]string]{out, source}
	case *Setting[map[string]string]:
		m, ok := v.(map[string]any)
		if !ok {
			return bad()
		}
		out := map[string]string{}
		for k, e := range m {
			switch x := e.(type) {
			case string:
				out[k] = x
			case bool, int64, float64:
				out[k] = fmt.Sprint(x)
			default:
				return fmt.Errorf("value of %q: want a string, number or boolean, got %s", k, tomlType(e))
			}
		}
		*p = Setting[map[string]string]{out, source}
	case *Setting[[]Secret]:
		arr, ok := v.([]map[string]any)
		if !ok {
			return fmt.Errorf("want [[sandbox.secrets]] tables, got %s", tomlType(v))
		}
		b, _ := json.Marshal(arr)
		list, err := decodeSecrets(b)
		if err != nil {
			return err
		}
		*p = Setting[[]Secret]{list, source}
	default:
		panic(fmt.Sprintf("config: field %s has an unknown type %T", f.key, f.ptr))
	}
	return nil
}

// Secret is one brokered secret as configured ([[sandbox.secrets]], or
// HSBX_SECRETS as a JSON array): the variable the sandbox sees its
// placeholder under, the hosts that may receive the value, how it is sent,
// and where the value is on the host (an environment variable, or a file
// read at each request). Never the value itself.
type Secret struct {
	Name   string   `json:"name"`
	Hosts  []string `json:"hosts"`
	Header string   `json:"header,omitempty"`
	In     []string `json:"in,omitempty"`
	Env    string   `json:"env,omitempty"`
	File   string   `json:"file,omitempty"`
}

func (d Secret) secret() sandbox.Secret {
	return sandbox.Secret{Name: d.Name, Hosts: d.Hosts, Header: d.Header, In: d.In, Env: d.Env, File: d.File}
}

// decodeSecrets reads secrets strictly (an unknown key is an error: a
// misspelt "hosts" must not leave a secret with none); a file is an
// absolute path (or ~/...).
func decodeSecrets(b []byte) ([]Secret, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var list []Secret
	if err := dec.Decode(&list); err != nil {
		return nil, err
	}
	if list == nil {
		list = []Secret{}
	}
	for i, d := range list {
		if d.File == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(d.File, "~/"); ok {
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, fmt.Errorf("secret %s: file %q: %v", d.Name, d.File, err)
			}
			list[i].File = filepath.Join(home, rest)
		} else if !filepath.IsAbs(d.File) {
			return nil, fmt.Errorf("secret %s: file %q: want an absolute path (or ~/...)", d.Name, d.File)
		}
	}
	return list, nil
}

// The network setting's values.
const (
	NetworkOn    = "on"    // the engine's network: anything the host reaches
	NetworkOff   = "off"   // no network interface but loopback: nothing leaves
	NetworkAllow = "allow" // off, plus hsbx's relay to what egress_allow names
)

// parseNetwork reads the network setting: on, off, allow, or a boolean
// (Hermes's TERMINAL_DOCKER_NETWORK) for on and off.
func parseNetwork(raw string) (string, error) {
	switch v := strings.ToLower(strings.TrimSpace(raw)); v {
	case NetworkOn, NetworkOff, NetworkAllow:
		return v, nil
	}
	if b, err := parseBool(raw); err == nil {
		if b {
			return NetworkOn, nil
		}
		return NetworkOff, nil
	}
	return "", fmt.Errorf("%q: want on, off or allow (true/1/yes for on, false/0/no for off)", raw)
}

func parseBool(raw string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("%q: want true/1/yes or false/0/no", raw)
}

func jsonStrings(raw string) ([]string, error) {
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
}

func jsonStringMap(raw string) (map[string]string, error) {
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
func ParseDuration(raw string) (time.Duration, error) {
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
