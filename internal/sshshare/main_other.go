//go:build !unix

package sshshare

import (
	"fmt"
	"os"
	"os/exec"
)

// Main is the stand-in where a process cannot become another (Windows):
// it runs the real ssh and passes on its status.
func Main(args []string) int {
	argv, err := Argv(os.Getenv, args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 255
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "hsbx's ssh stand-in: running %s: %v\n", argv[0], err)
		return 255
	}
	return 0
}
