//go:build unix

package sshshare

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Main is the stand-in: it becomes the real ssh (Argv), with its own
// variables and directory gone from the environment. It returns only
// when it could not (ssh's own status for a failure of its own, 255).
func Main(args []string) int {
	argv, err := Argv(os.Getenv, args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 255
	}
	bin := filepath.Dir(os.Args[0]) // docker ran the stand-in by its path on PATH
	var env []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case EnvReal, EnvControl, EnvPersist:
			continue
		case "PATH":
			kv = "PATH=" + withoutDir(v, bin)
		}
		env = append(env, kv)
	}
	err = syscall.Exec(argv[0], argv, env)
	fmt.Fprintf(os.Stderr, "hsbx's ssh stand-in: running %s: %v\n", argv[0], err)
	return 255
}
