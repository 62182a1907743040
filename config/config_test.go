package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func load(t *testing.T, file string, env map[string]string, flags ...Flag) (*Config, error) {
	t.Helper()
	p := ""
	if file != "" {
		p = filepath.Join(t.TempDir(), "c.toml")
		if err := os.WriteFile(p, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Load(Options{File: p, Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, Flags: flags})
}

// flag > env > file > default, for a setting of every type, each with its
// source.
func TestPrecedence(t *testing.T) {
	file := "task = \"f\"\nlog_level = \"info\"\nengine_timeout = 30\nknown_paths = [\"/k\"]\n[sandbox]\ncpu = 2\nnetwork = false\nvolumes = [\"/a:/b\"]\nenv = { A = 1 }\n[reaper]\nlifetime = \"90s\"\n"
	env := map[string]string{"HSBX_TASK": "e", "HSBX_ENGINE_TIMEOUT": "45", "TERMINAL_DOCKER_NETWORK": "true", "HSBX_KNOWN_PATHS": "/x:/y",
		"TERMINAL_DOCKER_ENV": `{"B":"2"}`}
	c, err := load(t, file, env, Flag{Key: "task", Value: "fl", Name: "--task"}, Flag{Key: "sandbox.timeout", Value: "5", Name: "--timeout"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		got, want    any
		src, wantSrc string
	}{
		{c.Task.Value, "fl", c.Task.Source, "flag --task"},
		{c.LogLevel.Value, "info", c.LogLevel.Source, "file "},
		{c.EngineTimeout.Value, 45 * time.Second, c.EngineTimeout.Source, "env HSBX_ENGINE_TIMEOUT"},
		{strings.Join(c.KnownPaths.Value, ","), "/x,/y", c.KnownPaths.Source, "env HSBX_KNOWN_PATHS"},
		{c.Sandbox.CPU.Value, 2.0, c.Sandbox.CPU.Source, "file "},
		{c.Sandbox.Network.Value, "on", c.Sandbox.Network.Source, "env TERMINAL_DOCKER_NETWORK"},
		{c.Sandbox.Env.Value["B"], "2", c.Sandbox.Env.Source, "env TERMINAL_DOCKER_ENV"},
		{c.Sandbox.Timeout.Value, 5 * time.Second, c.Sandbox.Timeout.Source, "flag --timeout"},
		{c.Reaper.Lifetime.Value, 90 * time.Second, c.Reaper.Lifetime.Source, "file "},
		{c.Sandbox.Memory.Value, int64(5120), c.Sandbox.Memory.Source, "default"},
		{c.Profile.Value, "default", c.Profile.Source, "default"},
	} {
		if tc.got != tc.want || !strings.HasPrefix(tc.src, tc.wantSrc) {
			t.Errorf("got %v from %q, want %v from %q", tc.got, tc.src, tc.want, tc.wantSrc)
		}
	}
	if s := c.Spec(); !s.Network || s.CPU != 2 || !s.Explicit["cpu"] || s.Explicit["memory"] {
		t.Errorf("Spec %+v", s)
	}
	keys, all := c.All()
	if !slices.Contains(keys, "task") || all["engine_timeout"].V != "45s" || all["task"].Source != "flag --task" {
		t.Errorf("All: %v %v", keys, all["engine_timeout"])
	}
}

// Every configuration error names its source and key, before any engine
// call; an empty environment value means unset except for strings.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		flags      []Flag
		want       string
	}{
		{"enum", "", map[string]string{"HSBX_LOG_LEVEL": "loud"}, nil, `env HSBX_LOG_LEVEL: "loud": want one of debug, info, warn, error`},
		{"flag duration", "", nil, []Flag{{Key: "engine_timeout", Value: "soon", Name: "--engine-timeout"}}, "flag --engine-timeout: \"soon\": want a duration"},
		{"zero engine timeout", "engine_timeout = 0\n", nil, nil, "engine_timeout: want a duration > 0"},
		{"empty task", "", map[string]string{"HSBX_TASK": ""}, nil, "env HSBX_TASK: task: empty"},
		{"wrong type", "[sandbox]\npersistent = \"no\"\n", nil, nil, "sandbox.persistent: want a boolean"},
		{"unknown key", "[sandbox]\nimgae = \"x\"\n", nil, nil, "unknown key (did you mean sandbox.image?)"},
		{"json of the wrong type", "", map[string]string{"TERMINAL_DOCKER_EXTRA_ARGS": `"--gpus=all"`}, nil, "want a JSON array of strings, got a string"},
		{"negative", "[reaper]\nlifetime = -1\n", nil, nil, "want a duration >= 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.file, tc.env, tc.flags...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if ce, ok := err.(*Error); !ok || ce.Hint() == "" {
				t.Errorf("%T without a hint", err)
			}
		})
	}
	c, err := load(t, "", map[string]string{"TERMINAL_DOCKER_NETWORK": "", "TERMINAL_SANDBOX_DIR": ""})
	if err != nil || c.Sandbox.Network.Value != NetworkOn || c.Sandbox.Network.Source != "default" || c.Sandbox.SandboxDir.Source != "env TERMINAL_SANDBOX_DIR" {
		t.Errorf("empty env values: %+v %+v %v", c.Sandbox.Network, c.Sandbox.SandboxDir, err)
	}
}

// Defaults live in one place: the sandbox's are sandbox.DefaultSpec's.
func TestDefaultsAreTheSpecs(t *testing.T) {
	c := &Config{Settings: Defaults()}
	s := c.Spec()
	if s.Image == "" || s.CPU != 1 || s.MemoryMB != 5120 || s.PidsLimit != 256 || !s.Network || !s.PersistAcrossProcesses || len(s.Explicit) != 0 {
		t.Errorf("default spec %+v", s)
	}
	for _, f := range c.fields() {
		if f.source() != "default" {
			t.Errorf("%s defaults from %q", f.key, f.source())
		}
	}
}
