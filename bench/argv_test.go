package main

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/hsbx/hsbx/internal/proc"
)

// The baseline's argv is read back exactly from hsbx's debug log line.
func TestLoggedArgv(t *testing.T) {
	argv := []string{"/usr/bin/docker", "run", "-d", "--name", "n", "--label", "hsbx.config=1 image=0a0b cwd=0c0d", "--label", `q="x" \y`, "-e", "A", "img", "sleep", "infinity"}
	var log bytes.Buffer
	r := &proc.Runner{Log: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	_, _ = r.Run(context.Background(), proc.Cmd{Argv: append([]string{"/no/such/binary"}, argv[1:]...)})
	got := loggedArgv(log.String())
	if want := append([]string{"/no/such/binary"}, argv[1:]...); !slices.Equal(got, want) {
		t.Fatalf("read %q\nfrom %s\nwant %q", got, log.String(), want)
	}
}
