// Command hostileagent is hsbx's agent in all but its copies out: what
// root in a sandbox could put at the agent's path (hsbx runs what is
// there). Asked for a copy out, it sends an archive built to plant a link
// to a host file: a regular file, the same name again as a symbolic link
// climbing out of the destination, and a hard link to that name. Tests
// run it as the agent on every engine (enginetest.HostileAgentBinary):
// the host must stay whole whatever the agent sends.
package main

import (
	"archive/tar"
	"os"
	"path"

	"github.com/hsbx/hsbx/internal/agent"
)

func main() {
	args := os.Args[1:]
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
