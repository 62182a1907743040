package enginecli_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/runtime/docker"
	"github.com/hsbx/hsbx/runtime/enginecli"
)

// A library caller sees every engine call through its own logger.
func TestLoggerSeesEngineCalls(t *testing.T) {
	var logs bytes.Buffer
	sh, err := os.CreateTemp(t.TempDir(), "docker")
	if err != nil {
		t.Fatal(err)
	}
	sh.WriteString("#!/bin/sh\necho '{\"Client\":{\"Version\":\"28.2.2\"}}'\n")
	sh.Close()
	os.Chmod(sh.Name(), 0o755)
	e := docker.New(sh.Name(), enginecli.Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if _, err := e.Version(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "engine call") || !strings.Contains(logs.String(), "version --format") || !strings.Contains(logs.String(), "elapsed=") {
		t.Errorf("log: %s", logs.String())
	}
}
