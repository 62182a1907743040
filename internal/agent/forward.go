//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// Forward is the `forward ADDR` mode: one connection of a port forward.
// It connects to ADDR (a TCP address in the sandbox, within 10 s) and
// relays its stdin to the connection (half-closing it at the end of
// input) and the connection to its stdout. It returns when the sandbox's
// side has ended: the exec channel says a stream's end only by its exit,
// and a client reading until the end must see it.
func Forward(in io.Reader, out io.Writer, addr string) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	tc := c.(*net.TCPConn)
	defer tc.Close()
	go func() {
		_, _ = io.Copy(tc, in)
		_ = tc.CloseWrite()
	}()
	_, err = io.Copy(out, tc)
	if errors.Is(err, syscall.ECONNRESET) {
		err = nil // the server's way to end: the client sees its end
	}
	return err
}

// ForwardEnd is what the forward mode writes on stderr when the
// sandbox's side has ended (an error's words end it too): the host ends
// the mode's input then, for an engine client (kubectl's) that does not
// end while its input is open.
const ForwardEnd = "hsbx agent: forward: ended\n"

func runForward(addr string) int {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		os.Stderr.WriteString("hsbx agent: forward: " + err.Error() + "\n")
		return 1
	}
	if err := Forward(os.Stdin, os.Stdout, addr); err != nil {
		fmt.Fprintf(os.Stderr, "hsbx agent: forward to %s: %v\n", addr, err)
		return 1
	}
	os.Stderr.WriteString(ForwardEnd)
	return 0
}
