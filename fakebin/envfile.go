package fakebin

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"
)

// envFiles reads --env-file files as the engines' clients do (docker's
// opts.ParseEnvFile, podman's env.ParseFile, alike on these points): a
// line at a time, leading white space dropped, # starts a comment line,
// NAME=VALUE taken as it is (VALUE's own white space kept), a bare NAME
// from the client's environment; a name with white space in it, and a
// file that is not UTF-8, are refused.
func (f *fake) envFiles(paths []string) ([]string, error) {
	var env []string
	for _, path := range paths {
		fh, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("open %s: no such file or directory", path)
		}
		sc := bufio.NewScanner(fh)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimLeftFunc(sc.Text(), unicode.IsSpace)
			if !utf8.ValidString(line) {
				fh.Close()
				return nil, fmt.Errorf("env file %s contains invalid utf8 bytes at line %d", path, n)
			}
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, "=")
			if strings.ContainsAny(k, " \t\n\v\f\r") {
				fh.Close()
				return nil, fmt.Errorf("variable '%s' contains whitespaces", k)
			}
			if ok {
				env = append(env, k+"="+v)
			} else if v, has := f.env[k]; has {
				env = append(env, k+"="+v)
			}
		}
		fh.Close()
	}
	return env, nil
}
