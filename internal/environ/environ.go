// Package environ reads a process environment given as a list of
// "KEY=value" strings (what os.Environ returns), so code that is handed an
// environment never reaches for the process's own.
package environ

import "strings"

// Lookup returns the value of key in env; the last entry wins, as for a
// process started with env.
func Lookup(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// Getter returns Lookup bound to env, reading env once into a map: for a
// caller that looks up many keys (the configuration asks for some fifty).
func Getter(env []string) func(string) (string, bool) {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v // the last entry wins, as in Lookup
		}
	}
	return func(key string) (string, bool) {
		v, ok := m[key]
		return v, ok
	}
}
