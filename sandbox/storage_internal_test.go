package sandbox

import (
	"strings"
	"testing"

	"github.com/hsbx/hsbx/runtime"
)

// A remote engine gets no host path it cannot have: each setting that
// would hand it one is refused with its name; a path under Shared, and
// every path on a local engine, passes.
func TestPlacement(t *testing.T) {
	remote := runtime.Location{Remote: true, Address: "ssh://me@box", Source: "DOCKER_HOST"}
	shared := remote
	shared.Shared = []string{"/Users/me"}
	base, cwd := "/home/me/.local/state/hsbx/sandboxes/k", "/home/me/project"
	spec := func(mod func(*Spec)) Spec {
		s := DefaultSpec()
		mod(&s)
		return s
	}
	for _, tc := range []struct {
		name string
		s    Spec
		loc  runtime.Location
		cwd  string
		want string // the refused setting, "" = allowed
		d    runtime.Dialect
	}{
		{"defaults", spec(func(*Spec) {}), remote, cwd, "", runtime.Docker},
		{"the caller's directory", spec(func(s *Spec) { s.MountCwdToWorkspace = true }), remote, cwd, "mount_cwd_to_workspace", runtime.Docker},
		{"the caller's directory, shared", spec(func(s *Spec) { s.MountCwdToWorkspace = true }), shared, "/Users/me/project", "", runtime.Docker},
		{"a sibling of a shared directory", spec(func(s *Spec) { s.MountCwdToWorkspace = true }), shared, "/Users/me2", "mount_cwd_to_workspace", runtime.Docker},
		{"a volume with a host path", spec(func(s *Spec) { s.Volumes = []string{"/srv/data:/data"} }), remote, cwd, "volumes", runtime.Docker},
		{"a volume under a shared path", spec(func(s *Spec) { s.Volumes = []string{"/Users/me/data:/data:ro"} }), shared, cwd, "", runtime.Docker},
		{"the host's user", spec(func(s *Spec) { s.RunAsHostUser = true }), remote, cwd, "run_as_host_user", runtime.Docker},
		{"the host's user with shared paths", spec(func(s *Spec) { s.RunAsHostUser = true }), shared, cwd, "", runtime.Docker},
		{"storage = bind", spec(func(s *Spec) { s.Storage = StorageBind }), remote, cwd, "storage", runtime.Docker},
		{"storage = bind, not persistent", spec(func(s *Spec) { s.Storage, s.Persistent = StorageBind, false }), remote, cwd, "", runtime.Docker},
		{"storage = volume", spec(func(s *Spec) { s.Storage = StorageVolume }), remote, cwd, "", runtime.Docker},
		{"an OCI runtime on docker", spec(func(s *Spec) { s.OCIRuntime = "runsc" }), remote, cwd, "", runtime.Docker},
		{"an OCI runtime on podman", spec(func(s *Spec) { s.OCIRuntime = "/usr/bin/runsc" }), shared, cwd, "oci_runtime", runtime.Podman},
		{"podman's default runtime", spec(func(*Spec) {}), remote, cwd, "", runtime.Podman},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := placement(tc.s, tc.loc, base, tc.cwd, true, tc.d)
			se, _ := err.(*SpecError)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (se == nil || se.Setting != tc.want):
				t.Fatalf("got %v, want a refusal of %s", err, tc.want)
			case se != nil && (!strings.Contains(se.Msg, "ssh://me@box (DOCKER_HOST)") || !strings.Contains(se.Msg, "shared_paths") && tc.want != "run_as_host_user" && tc.want != "oci_runtime"):
				t.Fatalf("the refusal names neither the engine nor the way out: %v", err)
			}
		})
	}
}

// auto is bind where the engine reaches the state dir, volume elsewhere;
// an explicit choice stands.
func TestStorageAt(t *testing.T) {
	remote := runtime.Location{Remote: true}
	mac := runtime.Location{Remote: true, Shared: []string{"/Users/me"}}
	for _, tc := range []struct {
		setting string
		loc     runtime.Location
		base    string
		want    string
	}{
		{StorageAuto, runtime.Location{}, "/home/me/s", StorageBind},
		{"", runtime.Location{}, "/home/me/s", StorageBind},
		{StorageAuto, remote, "/home/me/s", StorageVolume},
		{StorageAuto, mac, "/Users/me/.local/state/hsbx", StorageBind},
		{StorageAuto, mac, "/var/lib/hsbx", StorageVolume},
		{StorageVolume, runtime.Location{}, "/home/me/s", StorageVolume},
		{StorageBind, remote, "/home/me/s", StorageBind},
	} {
		if got := StorageAt(tc.setting, tc.loc, tc.base); got != tc.want {
			t.Errorf("StorageAt(%q, %+v, %q) = %q, want %q", tc.setting, tc.loc, tc.base, got, tc.want)
		}
	}
}
