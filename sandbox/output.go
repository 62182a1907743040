package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"sync"

	"github.com/hsbx/hsbx/internal/proc"
)

// The os/exec-shaped helpers a Go programmer reaches for, on top of Exec.

// ExitError is a command that ran and exited non-zero, from Output,
// CombinedOutput and Lines.
type ExitError struct {
	Code   int
	Stderr []byte // Output: the command's stderr (its last 64 KiB)
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("command exited %d", e.Code)
	if s := strings.TrimSpace(string(e.Stderr)); s != "" {
		msg += ": " + clip(s, 200)
	}
	return msg
}

// Output runs argv and returns its stdout. A non-zero exit is an
// *ExitError carrying the stderr; an engine failure is the engine's error.
func (s *Sandbox) Output(ctx context.Context, argv ...string) ([]byte, error) {
	var out bytes.Buffer
	errTail := &proc.TailBuffer{Max: 64 << 10}
	code, err := s.Exec(ctx, Command{Argv: argv, Stdout: &out, Stderr: errTail})
	if err == nil && code != 0 {
		err = &ExitError{Code: code, Stderr: errTail.Bytes()}
	}
	return out.Bytes(), err
}

// CombinedOutput runs argv and returns its stdout and stderr interleaved.
func (s *Sandbox) CombinedOutput(ctx context.Context, argv ...string) ([]byte, error) {
	var out syncBuffer
	code, err := s.Exec(ctx, Command{Argv: argv, Stdout: &out, Stderr: &out})
	if err == nil && code != 0 {
		err = &ExitError{Code: code}
	}
	return out.Bytes(), err
}

// Lines runs c and yields its stdout line by line as it streams (without
// the newline), then a final error when the command failed (an *ExitError
// or the engine's). Stopping the loop early stops the command in the
// sandbox. c.Stdout is replaced.
func (s *Sandbox) Lines(ctx context.Context, c Command) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		c.Stdout = pw
		go func() {
			code, err := s.Exec(ctx, c)
			if err == nil && code != 0 {
				err = &ExitError{Code: code}
			}
			pw.CloseWithError(io.EOF)
			done <- err
		}()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			if !yield(sc.Text(), nil) {
				pr.CloseWithError(errStopped) // the writer fails: Exec stops the command
				<-done
				return
			}
		}
		pr.Close()
		err := <-done
		if err == nil {
			err = sc.Err()
		}
		if err != nil {
			yield("", err)
		}
	}
}

var errStopped = errors.New("the reader stopped")

// syncBuffer is a buffer two streams may write at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) Bytes() []byte { return b.b.Bytes() }
