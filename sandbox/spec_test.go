package sandbox

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/enginecli"
	"github.com/hsbx/hsbx/runtime/kubectl"
)

func TestParseVolume(t *testing.T) {
	cases := []struct {
		in   string
		want Volume
		err  string
	}{
		{"/h:/c", Volume{"/h", "/c", false}, ""},
		{"/h:/c:ro", Volume{"/h", "/c", true}, ""},
		{"/h:/c:rw", Volume{"/h", "/c", false}, ""},
		{"/h", Volume{}, "wrong number"},
		{"/h:/c:ro:x", Volume{}, "wrong number"},
		{"h:/c", Volume{}, "host path is not absolute"},
		{"/h:c", Volume{}, "container path is not absolute"},
		{"/h:/c:rx", Volume{}, `unknown mode "rx"`},
		{"", Volume{}, "wrong number"},
	}
	for _, tc := range cases {
		got, err := ParseVolume(tc.in)
		if tc.err != "" {
			var bs *SpecError
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &bs) || bs.Setting != "volumes" {
				t.Errorf("ParseVolume(%q) err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseVolume(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

func build(t *testing.T, s Spec, h engineHost) (string, []string, error) {
	t.Helper()
	rs, warns, err := buildRun(Key{Profile: "p", Task: "t"}, "n", s, h, mountPaths{Workspace: "/st/ws", Home: "/st/home", CallerCwd: "/here"},
		func(k string) (string, bool) {
			v, ok := map[string]string{"TOKEN": "tok", "PATH": "/bin"}[k]
			return v, ok
		})
	return strings.Join(rs.Args, " "), warns, err
}

func TestBuildRun(t *testing.T) {
	dirs := runtime.Capabilities{HostDirs: true}
	rootful := engineHost{Dialect: runtime.Docker, Caps: dirs, BackingFS: "extfs", UID: 1000, GID: 100}
	rootlessV1 := engineHost{Dialect: runtime.Podman, Caps: dirs, Rootless: true, CgroupV1: true, BackingFS: "extfs"}
	pod := engineHost{Dialect: runtime.Kubectl, Caps: kubectl.New("kubectl", enginecli.Options{}, kubectl.Target{}).Capabilities()}
	// an engine that cannot make a sandbox without a network at all
	noNetworkless := engineHost{Dialect: runtime.Docker, Caps: runtime.Capabilities{StopKeeps: true, HostDirs: true, Pulls: true,
		Lacks: map[runtime.Feature]string{runtime.NoNetwork: "this engine has no sandbox without a network"}}}
	explicit := func(setting string, f func(*Spec)) Spec {
		s := DefaultSpec()
		f(&s)
		s.Explicit = map[string]bool{setting: true}
		return s
	}
	mod := func(f func(*Spec)) Spec { s := DefaultSpec(); f(&s); return s }
	cases := []struct {
		name     string
		spec     Spec
		host     engineHost
		want     []string // substrings of the joined args
		not      []string
		warn     string
		errField string
	}{
		{name: "defaults", spec: DefaultSpec(), host: rootful,
			want: []string{"--init -w /root --cap-drop ALL --cap-add DAC_OVERRIDE --cap-add CHOWN --cap-add FOWNER --cap-add SETUID --cap-add SETGID --security-opt no-new-privileges",
				"--pids-limit 256 --cpus 1 --memory 5120m --shm-size 1g -v /st/ws:/workspace -v /st/home:/root"},
			not: []string{"--network", "--storage-opt", "--user"}},
		{name: "host user drops setuid", spec: mod(func(s *Spec) { s.RunAsHostUser = true }), host: rootful,
			want: []string{"--user 1000:100"}, not: []string{"SETUID", "SETGID"}},
		{name: "no network", spec: mod(func(s *Spec) { s.Network = false }), host: rootful, want: []string{"--network none"}},
		{name: "not persistent", spec: mod(func(s *Spec) { s.Persistent = false }), host: rootful,
			want: []string{"--tmpfs /workspace:rw,exec,size=1g --tmpfs /root:rw,exec,size=256m"}, not: []string{"/st/"}},
		{name: "mount cwd", spec: mod(func(s *Spec) { s.MountCwdToWorkspace = true }), host: rootful,
			want: []string{"-w /workspace", "-v /here:/workspace -v /st/home:/root"}, not: []string{"/st/ws"}},
		{name: "mount cwd keeps an explicit cwd", spec: mod(func(s *Spec) { s.MountCwdToWorkspace = true; s.Cwd = "/x"; s.Explicit = map[string]bool{"cwd": true} }), host: rootful,
			want: []string{"-w /x"}},
		{name: "gVisor's pids limit counts its host tasks", spec: mod(func(s *Spec) { s.OCIRuntime = "/usr/local/bin/runsc" }), host: rootful,
			want: []string{"--pids-limit 2560 "}, not: []string{"--pids-limit 256 "}},
		{name: "zero limits are off", spec: mod(func(s *Spec) { s.CPU, s.MemoryMB, s.PidsLimit = 0, 0, 0 }), host: rootful,
			not: []string{"--cpus", "--memory", "--pids-limit"}},
		{name: "extra args last", spec: mod(func(s *Spec) { s.ExtraArgs = []string{"--gpus=all"}; s.Volumes = []string{"/a:/b:ro"} }), host: rootful,
			want: []string{"-v /a:/b:ro --gpus=all"}},
		{name: "rootless v1 drops default limits", spec: DefaultSpec(), host: rootlessV1,
			not: []string{"--cpus", "--memory", "--pids-limit"}, warn: "default --pids-limit 256, --cpus 1, --memory 5120m left off"},
		{name: "rootless v1 refuses a user's limit", spec: mod(func(s *Spec) { s.PidsLimit = 64; s.Explicit = map[string]bool{"pids_limit": true} }), host: rootlessV1,
			errField: "pids_limit"},
		{name: "rootless v2 applies limits", spec: DefaultSpec(), host: engineHost{Dialect: runtime.Podman, Caps: dirs, Rootless: true},
			want: []string{"--pids-limit 256 --cpus 1 --memory 5120m"}},
		{name: "disk on xfs", spec: mod(func(s *Spec) { s.DiskMB = 2048 }), host: engineHost{Caps: dirs, BackingFS: "xfs"}, want: []string{"--storage-opt size=2048m"}},
		{name: "disk on extfs", spec: mod(func(s *Spec) { s.DiskMB = 2048 }), host: rootful, errField: "disk"},
		{name: "bad volume", spec: mod(func(s *Spec) { s.Volumes = []string{"x"} }), host: rootful, errField: "volumes"},
		{name: "bad env name", spec: mod(func(s *Spec) { s.Env = map[string]string{"A-B": "1"} }), host: rootful, errField: "env"},
		{name: "client var", spec: mod(func(s *Spec) { s.Env = map[string]string{"PATH": "/evil"} }), host: rootful, errField: "env"},
		{name: "client var unchanged is fine", spec: mod(func(s *Spec) { s.ForwardEnv = []string{"PATH"} }), host: rootful},
		{name: "relative cwd", spec: mod(func(s *Spec) { s.Cwd = "x" }), host: rootful, errField: "cwd"},
		{name: "bad shm", spec: mod(func(s *Spec) { s.ShmSize = "lots" }), host: rootful, errField: "shm_size"},
		{name: "oci_runtime passed", spec: mod(func(s *Spec) { s.OCIRuntime = "runsc" }), host: rootful, want: []string{"--runtime runsc "}},
		{name: "oci_runtime as a path", spec: mod(func(s *Spec) { s.OCIRuntime = "/usr/bin/runsc" }), host: rootful, want: []string{"--runtime /usr/bin/runsc "}},
		{name: "oci_runtime with a control character", spec: mod(func(s *Spec) { s.OCIRuntime = "runsc\x1b[2J" }), host: rootful, errField: "oci_runtime"},
		{name: "oci_runtime with a space", spec: mod(func(s *Spec) { s.OCIRuntime = "run sc" }), host: rootful, errField: "oci_runtime"},
		{name: "oci_runtime that reads as a flag", spec: mod(func(s *Spec) { s.OCIRuntime = "--privileged" }), host: rootful, errField: "oci_runtime"},
		{name: "oci_runtime and extra_args --runtime", spec: mod(func(s *Spec) { s.OCIRuntime = "runsc"; s.ExtraArgs = []string{"--runtime=runc"} }), host: rootful, errField: "oci_runtime"},
		// What the engine lacks (Capabilities.Lacks, no HostDirs): a default
		// is left off with a warning, a user's choice is refused.
		{name: "lacking pids limit drops the default", spec: mod(func(s *Spec) { s.Persistent = false }), host: pod,
			want: []string{"--cpus 1 --memory 5120m"}, not: []string{"--pids-limit", "-v "}, warn: "podPidsLimit), not per Pod: default pids_limit 256 left off"},
		{name: "lacking pids limit refuses a user's", spec: explicit("pids_limit", func(s *Spec) { s.PidsLimit = 64 }), host: pod, errField: "pids_limit"},
		{name: "lacking no-network", spec: mod(func(s *Spec) { s.Network = false }), host: noNetworkless, errField: "network"},
		{name: "a Pod without network: --network none (its NetworkPolicy)", spec: mod(func(s *Spec) { s.Network = false; s.Persistent = false }), host: pod, want: []string{"--network none"}, warn: "podPidsLimit), not per Pod"},
		{name: "lacking disk quota", spec: mod(func(s *Spec) { s.DiskMB = 10 }), host: pod, errField: "disk"},
		{name: "lacking run flags", spec: mod(func(s *Spec) { s.ExtraArgs = []string{"--gpus=all"} }), host: pod, errField: "extra_args"},
		{name: "no host dirs refuses volumes", spec: mod(func(s *Spec) { s.Volumes = []string{"/a:/b"} }), host: pod, errField: "volumes"},
		{name: "no host dirs refuses the caller's dir", spec: mod(func(s *Spec) { s.MountCwdToWorkspace = true }), host: pod, errField: "mount_cwd_to_workspace"},
		{name: "no host dirs refuses a chosen persistence", spec: explicit("persistent", func(s *Spec) {}), host: pod, errField: "persistent"},
		{name: "no host dirs keeps the default in memory", spec: DefaultSpec(), host: pod,
			not: []string{"/st/"}, warn: "memory-backed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args, warns, err := build(t, tc.spec, tc.host)
			if tc.errField != "" {
				var bs *SpecError
				if !errors.As(err, &bs) || bs.Setting != tc.errField {
					t.Fatalf("err = %v, want one naming %s", err, tc.errField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(args, w) {
					t.Errorf("args lack %q:\n%s", w, args)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(args, n) {
					t.Errorf("args have %q:\n%s", n, args)
				}
			}
			if (tc.warn == "") != (len(warns) == 0) || (tc.warn != "" && !strings.Contains(strings.Join(warns, "\n"), tc.warn)) {
				t.Errorf("warnings %q, want %q", warns, tc.warn)
			}
		})
	}
}

func TestBuildRunEnvValuesStayOffArgv(t *testing.T) {
	s := DefaultSpec()
	s.Env = map[string]string{"LIT": "lit-secret"}
	s.ForwardEnv = []string{"TOKEN", "MISSING"}
	rs, _, err := buildRun(Key{Profile: "p", Task: "t"}, "n", s, engineHost{}, mountPaths{Workspace: "/w", Home: "/h"},
		func(k string) (string, bool) { v, ok := map[string]string{"TOKEN": "tok-secret"}[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if rs.Env["LIT"] != "lit-secret" || rs.Env["TOKEN"] != "tok-secret" || len(rs.Env) != 2 {
		t.Errorf("env values %v", rs.Env)
	}
	if strings.Contains(strings.Join(rs.Args, " "), "secret") {
		t.Errorf("a value is in the args: %v", rs.Args)
	}
	if rs.Cmd[0] != "sleep" || rs.Cmd[1] != "infinity" || rs.Labels[LabelKey] == "" {
		t.Errorf("run spec %+v", rs)
	}
}

func TestMemoryMounts(t *testing.T) {
	base := []string{"/tmp", "/var/tmp", "/run"}
	for _, tc := range []struct {
		name string
		spec Spec
		want []string
	}{
		{"persistent", Spec{Persistent: true}, base},
		{"not persistent", Spec{}, append(append([]string{}, base...), "/workspace", "/root")},
		{"cwd at /workspace", Spec{MountCwdToWorkspace: true}, append(append([]string{}, base...), "/root")},
		{"extra --tmpfs both forms", Spec{Persistent: true, ExtraArgs: []string{"--tmpfs", "/cache:size=1m", "--tmpfs=data/", "--gpus=all"}},
			append(append([]string{}, base...), "/cache", "/data")},
		{"--tmpfs with no value", Spec{Persistent: true, ExtraArgs: []string{"--tmpfs"}}, base},
	} {
		if got := tc.spec.MemoryMounts(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// extra_args' environment values leave the engine client's command line
// (where ps shows them, to every user): TERMINAL_DOCKER_EXTRA_ARGS=
// '["--env","API_KEY=..."]' put the value on argv during create.
func TestMoveEnvValues(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		rest []string
		vals map[string]string
	}{
		{[]string{"--env", "API_KEY=s3cret", "--gpus=all"}, []string{"--gpus=all"}, map[string]string{"API_KEY": "s3cret"}},
		{[]string{"-e", "A=1", "-eB=2=x", "--env=C=", "--env", "D"}, []string{"--env", "D"}, map[string]string{"A": "1", "B": "2=x", "C": ""}},
		{[]string{"-e", "=x", "--entrypoint", "sh"}, []string{"-e", "=x", "--entrypoint", "sh"}, map[string]string{}},
		{[]string{"--env"}, []string{"--env"}, map[string]string{}},
	} {
		rest, vals := moveEnvValues(tc.in)
		if !slices.Equal(rest, tc.rest) || !maps.Equal(vals, tc.vals) {
			t.Errorf("%q: rest %q vals %v, want %q %v", tc.in, rest, vals, tc.rest, tc.vals)
		}
	}
}
