// Command hostileagent is hsbx's agent in all but its copies out: what
// root in a sandbox could put at the agent's path (hsbx runs what is
// there). Asked for a copy out, it sends an archive built to plant a link
// to a host file: a regular file, the same name again as a symbolic link
// climbing out of the destination, and a hard link to that name. Tests
// run it as the agent on every engine (enginetest.HostileAgentBinary):
// the host must stay whole whatever the agent sends.
//
// Run as `squat SOCKET` (a command through the channel, as
// /proc/self/exe), it leaves behind a process of the sandbox's user that
// listens on SOCKET, accepts and never answers: what may sit on the
// session server's socket.
package main

import (
	"archive/tar"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hsbx/hsbx/internal/agent"
)

func main() {
	args := os.Args[1:]
	switch {
	case len(args) == 2 && args[0] == "squat":
		_ = os.MkdirAll(filepath.Dir(args[1]), 0o700)
		null, _ := os.Open(os.DevNull)
		p, err := os.StartProcess("/proc/self/exe", []string{"squatter", "squat-serve", args[1]},
			&os.ProcAttr{Files: []*os.File{null, null, null}, Sys: &syscall.SysProcAttr{Setsid: true}})
		if err != nil {
			os.Exit(1)
		}
		_ = p.Release()
		for range 100 {
			if _, err := os.Stat(args[1]); err == nil {
				os.Exit(0)
			}
			time.Sleep(20 * time.Millisecond)
		}
		os.Exit(1)
	case len(args) == 2 && args[0] == "squat-serve":
		// Through the directory's descriptor: any path fits a socket's.
		dir, err := os.Open(filepath.Dir(args[1]))
		if err != nil {
			os.Exit(1)
		}
		ln, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(args[1])))
		if err != nil {
			os.Exit(1)
		}
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(0)
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}
	if len(args) >= 2 && (args[0] == "copy-out" || args[0] == "tar-out") {
		top := path.Base(args[1])
		tw := tar.NewWriter(os.Stdout)
		for _, h := range []*tar.Header{
			{Name: top + "/a/b/c/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 8},
			{Name: top + "/a/b/c/f", Typeflag: tar.TypeSymlink, Linkname: "../../../../outside"},
			{Name: top + "/h", Typeflag: tar.TypeLink, Linkname: top + "/a/b/c/f"},
		} {
			if tw.WriteHeader(h) != nil {
				os.Exit(1)
			}
			if h.Size > 0 {
				_, _ = tw.Write([]byte("planted\n"))
			}
		}
		_ = tw.Close()
		os.Exit(0)
	}
	code, ok := agent.RunMode(args, "hostile")
	if !ok {
		code = 2
	}
	os.Exit(code)
}
