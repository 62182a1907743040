// Package cachefile keeps small caches as a JSON object in one file:
// what hsbx learned about engine binaries and endpoints, so later processes
// skip engine calls. It is best effort by design: a missing or corrupt file
// reads as empty, and a failed write only costs a recomputation next time.
package cachefile

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// Get returns the entry for key in the cache file at path.
func Get[T any](path, key string) (T, bool) {
	v, ok := load[T](path)[key]
	return v, ok
}

// Delete drops key's entry (a fact the engine just contradicted).
func Delete(path, key string) {
	m := load[json.RawMessage](path)
	if _, ok := m[key]; !ok {
		return
	}
	delete(m, key)
	write(path, m)
}

// Put records key's entry, replacing the file atomically (write to a temp
// file, rename), so concurrent readers never see half a file.
func Put[T any](path, key string, v T) {
	m := load[T](path)
	m[key] = v
	write(path, m)
}

// PutReplacing is Put that also drops the entries stale says key
// supersedes (the same binary's verdict for its earlier size and mtime),
// so a cache every process reads stays as small as what it describes.
func PutReplacing[T any](path, key string, v T, stale func(k string) bool) {
	m := load[T](path)
	for k := range m {
		if k != key && stale(k) {
			delete(m, k)
		}
	}
	m[key] = v
	write(path, m)
}

func write[T any](path string, m map[string]T) {
	b, err := json.Marshal(m)
	dir := filepath.Dir(path)
	if err != nil || os.MkdirAll(dir, 0o700) != nil {
		return
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
		_ = os.Remove(tmp.Name())
	}
}

func load[T any](path string) map[string]T {
	m := map[string]T{}
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &m) // a corrupt cache is an empty one
	}
	return m
}
