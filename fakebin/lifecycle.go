package fakebin

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

var runFlags = flagSet{
	values: set("--name", "--label", "-l", "--env", "-e", "--env-file", "--workdir", "-w", "--cap-drop", "--cap-add",
		"--security-opt", "--tmpfs", "--pids-limit", "--cpus", "--memory", "-m", "--shm-size", "--network", "--net",
		"--storage-opt", "--volume", "-v", "--user", "-u", "--mount", "--add-host", "--hostname", "-h", "--entrypoint",
		"--ulimit", "--memory-swap", "--device", "--dns", "--restart", "--stop-signal", "--stop-timeout", "--userns",
		"--ipc", "--pid", "--platform", "--pull", "--log-driver", "--log-opt", "--label-file", "--cidfile", "--gpus",
		"--publish", "-p", "--expose", "--group-add", "--cgroupns", "--cgroup-parent", "--runtime"),
	bools: set("-d", "--detach", "--init", "--rm", "-i", "--interactive", "-t", "--tty", "--privileged", "--read-only", "-P"),
}

// runtimes are the OCI runtimes the fake engine has: runc, and those
// FAKEENGINE_RUNTIMES names (comma-separated; podman: names or paths).
func (f *fake) runtimes() []string {
	rs := []string{"runc"}
	if v := f.env["FAKEENGINE_RUNTIMES"]; v != "" {
		rs = append(rs, strings.Split(v, ",")...)
	}
	return rs
}

// hasRuntime says whether --runtime NAME is one the engine runs.
func (f *fake) hasRuntime(name string) bool {
	if f.dialect == "docker" {
		_, ok := f.runtimeTable()[name]
		return ok
	}
	return slices.Contains(f.runtimes(), name)
}

// runtimeOf is the runtime a container runs under as inspect names it:
// the --runtime it was run with, else the default (runc).
func runtimeOf(c *Container) string {
	p, _ := runFlags.parse(c.RunArgs)
	if rt := p.last("--runtime"); rt != "" {
		return rt
	}
	return "runc"
}

// images lists the images the fake engine has; anything else cannot be
// pulled (there is no registry), as on the machines hsbx is tested on.
func (f *fake) images() []string {
	if s, ok := f.env["FAKEENGINE_IMAGES"]; ok {
		return strings.Split(s, ",")
	}
	return []string{"hsbx-busybox", "busybox", "alpine", "debian:bookworm-slim"}
}

func normImage(s string) string {
	s = strings.TrimPrefix(s, "docker.io/library/")
	s = strings.TrimPrefix(s, "docker.io/")
	s = strings.TrimPrefix(s, "localhost/")
	return strings.TrimSuffix(s, ":latest")
}

func (f *fake) haveImage(img string) bool {
	have := f.images()
	committed := false
	_ = f.st.view(func(st *State) error {
		have = append(have, st.Pulled...)
		committed = st.committed(img) != nil
		return nil
	})
	if committed {
		return true
	}
	for _, h := range have {
		if normImage(h) == normImage(img) {
			return true
		}
	}
	return false
}

// pull is `pull [--] REF`: an image FAKEENGINE_REGISTRY lists (comma
// separated) is "downloaded" (progress lines, then it is local); any other
// fails as on a machine without a registry.
func (f *fake) pull(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) != 1 {
		return f.usage(fmt.Sprintf("\"%s pull\" requires exactly 1 argument", f.name))
	}
	ref := args[0]
	for _, r := range strings.Split(f.env["FAKEENGINE_REGISTRY"], ",") {
		if r == "" || normImage(r) != normImage(ref) {
			continue
		}
		if f.dialect == "podman" {
			fmt.Fprintf(f.stderr, "Trying to pull %s...\nGetting image source signatures\nCopying blob 0123456789ab done\nWriting manifest to image destination\n", ref)
			fmt.Fprintln(f.stdout, strings.Repeat("ab", 32))
		} else {
			fmt.Fprintf(f.stdout, "latest: Pulling from library/%s\n0123456789ab: Pull complete\nStatus: Downloaded newer image for %s\n", normImage(ref), ref)
		}
		if err := f.st.update(func(st *State) error { st.Pulled = append(st.Pulled, ref); return nil }); err != nil {
			return f.fail(err)
		}
		return 0
	}
	if f.dialect == "podman" {
		fmt.Fprintf(f.stderr, "Error: short-name %q did not resolve to an alias and no unqualified-search registries are defined in \"/etc/containers/registries.conf\"\n", ref)
		return 125
	}
	fmt.Fprintln(f.stderr, `Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on 10.255.255.53:53: no such host`)
	return 1
}

var errNameInUse = errors.New("name in use")

func (f *fake) run(args []string, createOnly bool) int {
	p, bad := runFlags.parse(args)
	if bad != "" {
		return f.flagError(bad)
	}
	if len(p.pos) == 0 {
		if f.dialect == "podman" {
			fmt.Fprintf(f.stderr, "Error: requires at least 1 arg(s), only received 0\n")
			return 125
		}
		fmt.Fprintf(f.stderr, "docker: '%s' requires at least 1 argument\n\nRun 'docker %s --help' for more information\n", f.sub, f.sub)
		return 125
	}
	image, cmd := p.pos[0], p.pos[1:]
	if !f.haveImage(image) && p.last("--pull") == "never" { // both engines' words, captured
		if f.dialect == "podman" {
			fmt.Fprintf(f.stderr, "Error: %s: image not known\n", image)
		} else {
			fmt.Fprintf(f.stderr, "docker: Error response from daemon: No such image: %s.\nSee 'docker run --help'.\n", image)
		}
		return 125
	}
	if !f.haveImage(image) {
		if f.dialect == "podman" {
			fmt.Fprintf(f.stderr, "Error: short-name %q did not resolve to an alias and no unqualified-search registries are defined in \"/etc/containers/registries.conf\"\n", image)
		} else {
			fmt.Fprintf(f.stderr, "Unable to find image '%s' locally\ndocker: Error response from daemon: Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io: no such host\n\nRun 'docker %s --help' for more information\n", image, f.sub)
		}
		return 125
	}
	if f.env["FAKEENGINE_ROOTLESS"] == "1" && f.dialect == "podman" && p.has("--memory", "-m", "--cpus", "--pids-limit") {
		fmt.Fprintln(f.stderr, `time="2026-11-22T06:00:00Z" level=warning msg="Resource limits are not supported and ignored on cgroups V1 rootless systems"`)
	}
	if rt := p.last("--runtime"); rt != "" && !f.hasRuntime(rt) {
		// Refused before anything is made, on both engines (captured:
		// run_unknown_runtime).
		if f.dialect == "podman" {
			if strings.HasPrefix(rt, "/") {
				fmt.Fprintf(f.stderr, "Error: no valid executable found for OCI runtime %s: invalid argument\n", rt)
			} else {
				fmt.Fprintf(f.stderr, "Error: default OCI runtime %q not found: invalid argument\n", rt)
			}
		} else {
			fmt.Fprintf(f.stderr, "docker: Error response from daemon: Unknown runtime specified %s\n\nRun 'docker %s --help' for more information\n", rt, f.sub)
		}
		return 125
	}
	noTun := f.env["FAKEENGINE_NO_TUN"] == "1" && f.dialect == "podman" && p.last("--network", "--net") != "none"
	labels := map[string]string{}
	for _, l := range append(p.vals["--label"], p.vals["-l"]...) {
		k, v, _ := strings.Cut(l, "=")
		labels[k] = v
	}
	env, err := f.envFiles(p.vals["--env-file"])
	if err != nil {
		fmt.Fprintln(f.stderr, err)
		return 125
	}
	for _, e := range append(p.vals["--env"], p.vals["-e"]...) {
		if k, _, ok := strings.Cut(e, "="); ok && k != "" {
			env = append(env, e)
		} else if v, ok := f.env[e]; ok { // -e NAME: the value comes from the client's environment
			env = append(env, e+"="+v)
		}
	}
	var from *Image // a committed image's labels and variables are the container's, under its own
	_ = f.st.view(func(st *State) error { from = st.committed(image); return nil })
	if from != nil {
		for k, v := range from.Labels {
			if _, ok := labels[k]; !ok {
				labels[k] = v
			}
		}
		for _, kv := range from.Env {
			k, _, _ := strings.Cut(kv, "=")
			if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") }) {
				env = append([]string{kv}, env...)
			}
		}
	}
	detach := p.has("-d", "--detach")
	c := &Container{
		Name: p.last("--name"), Image: image, Labels: labels, Cmd: cmd, Env: env,
		WorkDir: p.last("--workdir", "-w"), User: p.last("--user", "-u"), Init: p.has("--init"),
		RunArgs: args, Created: f.now, State: "created",
	}
	if c.WorkDir == "" {
		c.WorkDir = "/"
	}
	var clash *Container
	startFailed := false
	err = f.st.update(func(st *State) error {
		if c.Name != "" {
			if clash = st.find(c.Name); clash != nil && clash.Name == c.Name {
				return errNameInUse
			}
			if id, ok := st.Storage[c.Name]; ok {
				clash = &Container{ID: id, Name: c.Name}
				return errNameInUse
			}
		}
		c.ID = st.newID(c.Name, f.now)
		st.makeVolumes(args, f.now)
		if c.Name == "" {
			c.Name = randomName(st.Seq)
		}
		if noTun {
			// rootless podman without /dev/net/tun: the container is made,
			// slirp4netns fails at start, podman removes it again and exits
			// 126 (measured); others see it "created" meanwhile
			st.Containers = append(st.Containers, c)
			startFailed = true
			return nil
		}
		if f.env["FAKEENGINE_RUN_START_FAILS"] == "1" {
			// the OCI runtime cannot start the process: both engines leave
			// the container behind in state "created" (measured)
			st.Containers = append(st.Containers, c)
			startFailed = true
			return nil
		}
		if f.env["FAKEENGINE_RUN_CLIENT_KILLED"] == "storage" && f.dialect == "podman" {
			// killed between podman's storage create and its registration
			if st.Storage == nil {
				st.Storage = map[string]string{}
			}
			st.Storage[c.Name] = c.ID
			return nil
		}
		if f.env["FAKEENGINE_RUN_CLIENT_KILLED"] == "created" {
			// the client died between the daemon's create and its start
			st.Containers = append(st.Containers, c)
			return nil
		}
		if !createOnly {
			c.StartedAt = f.now
			if longRunning(cmd) {
				c.State = "running"
			} else {
				c.State, c.FinishedAt = "exited", f.now
				c.ExitCode = quickExit(cmd)
			}
		}
		st.Containers = append(st.Containers, c)
		return nil
	})
	if errors.Is(err, errNameInUse) {
		if f.dialect == "podman" {
			fmt.Fprintf(f.stderr, "Error: creating container storage: the container name %q is already in use by %s. You have to remove that container to be able to reuse that name: that name is already in use\n", c.Name, clash.ID)
		} else {
			fmt.Fprintf(f.stderr, "docker: Error response from daemon: Conflict. The container name \"/%s\" is already in use by container %q. You have to remove (or rename) that container to be able to reuse that name.\n\nRun 'docker %s --help' for more information\n", c.Name, clash.ID, f.sub)
		}
		return 125
	}
	if err == nil && f.env["FAKEENGINE_RUN_CLIENT_KILLED"] != "" {
		return 137 // as a client killed by SIGKILL: nothing said, the daemon's work done
	}
	if err == nil && startFailed && noTun {
		time.Sleep(150 * time.Millisecond)
		_ = f.st.update(func(st *State) error { st.remove(st.find(c.ID)); return nil })
		fmt.Fprintln(f.stderr, `Error: /usr/bin/slirp4netns failed: "open(\"/dev/net/tun\"): Permission denied\nchild failed(1)\n"`)
		return 126
	}
	if err == nil && startFailed {
		what := fmt.Sprintf("exec: %q: executable file not found in $PATH", strings.Join(cmd, " "))
		if f.dialect == "podman" {
			fmt.Fprintf(f.stderr, "Error: runc: runc create failed: unable to start container process: %s: OCI runtime attempted to invoke a command that was not found\n", what)
		} else {
			fmt.Fprintf(f.stderr, "docker: Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: %s: unknown.\n", what)
		}
		return 127
	}
	if err != nil {
		return f.fail(err)
	}
	if createOnly || detach {
		fmt.Fprintln(f.stdout, c.ID)
		return 0
	}
	code := f.shell(c, cmd, c.WorkDir, nil)
	if p.has("--rm") {
		_ = f.st.update(func(st *State) error { st.remove(st.find(c.ID)); return nil })
	}
	return code
}

// longRunning says whether a container's main command keeps it running.
func longRunning(cmd []string) bool {
	if len(cmd) == 0 {
		return true // the image's default: a shell that waits
	}
	switch cmd[0] {
	case "sleep":
		return len(cmd) > 1 && cmd[1] != "0"
	case "tail", "cat", "sh", "bash":
		return len(cmd) == 1 || (len(cmd) > 1 && cmd[1] == "-f")
	}
	return false
}

// quickExit is the status of a short-lived main command (`sh -c 'exit N'`, false).
func quickExit(cmd []string) int {
	if len(cmd) == 0 {
		return 0
	}
	if cmd[0] == "false" {
		return 1
	}
	if len(cmd) == 3 && cmd[1] == "-c" && strings.HasPrefix(cmd[2], "exit ") {
		var n int
		fmt.Sscanf(cmd[2], "exit %d", &n)
		return n
	}
	return 0
}

// each applies fn to every ref under one lock; fn returns the exit status
// for that ref (0 on success).
func (f *fake) each(refs []string, fn func(st *State, ref string, c *Container) int) int {
	status := 0
	err := f.st.update(func(st *State) error {
		for _, ref := range refs {
			c := st.find(ref)
			if code := fn(st, ref, c); code != 0 {
				status = code
			}
		}
		return nil
	})
	if err != nil {
		return f.fail(err)
	}
	return status
}

func (f *fake) start(args []string) int {
	p, bad := flagSet{bools: set("-a", "--attach", "-i", "--interactive")}.parse(args)
	if bad != "" || len(p.pos) == 0 {
		return f.flagError(bad)
	}
	var failed []string
	code := f.each(p.pos, func(st *State, ref string, c *Container) int {
		switch {
		case c == nil:
			f.notFound(ref)
			failed = append(failed, ref)
			return f.notFoundCode()
		case c.State == "running":
			if f.dialect == "docker" {
				fmt.Fprintln(f.stdout, ref)
			}
			return 0
		case c.State == "paused":
			if f.dialect == "podman" {
				fmt.Fprintf(f.stderr, "Error: unable to start container %q: container %s must be in Created or Stopped state to be started: container state improper\n", c.ID, c.ID)
				return 125
			}
			fmt.Fprintln(f.stderr, "Error response from daemon: cannot start a paused container, try unpause instead")
			failed = append(failed, ref)
			return 1
		}
		c.State, c.StartedAt, c.ExitCode = "running", f.now, 0
		if !longRunning(c.Cmd) {
			c.State, c.FinishedAt, c.ExitCode = "exited", f.now, quickExit(c.Cmd)
		}
		fmt.Fprintln(f.stdout, ref)
		return 0
	})
	if len(failed) > 0 && f.dialect == "docker" {
		fmt.Fprintf(f.stderr, "Error: failed to start containers: %s\n", strings.Join(failed, ", "))
	}
	return code
}

func (f *fake) stop(args []string, kill bool) int {
	p, bad := flagSet{values: set("-t", "--time", "--timeout", "-s", "--signal")}.parse(args)
	if bad != "" || len(p.pos) == 0 {
		return f.flagError(bad)
	}
	return f.each(p.pos, func(st *State, ref string, c *Container) int {
		switch {
		case c == nil:
			f.notFound(ref)
			return f.notFoundCode()
		case kill && c.State != "running" && c.State != "paused":
			if f.dialect == "podman" {
				fmt.Fprintf(f.stderr, "Error: can only kill running containers. %s is in state %s: container state improper\n", c.ID, c.State)
				return 125
			}
			fmt.Fprintf(f.stderr, "Error response from daemon: Cannot kill container: %s: Container %s is not running\n", ref, c.ID)
			return 1
		case c.State == "running" || c.State == "paused":
			killExecs(c, "")
			c.State, c.FinishedAt = "exited", f.now
			c.ExitCode = 143
			if kill || !c.Init {
				c.ExitCode = 137 // without an init, sleep ignores SIGTERM as PID 1 and is killed
			}
		}
		fmt.Fprintln(f.stdout, ref)
		return 0
	})
}

func (f *fake) pause(args []string, pause bool) int {
	p, bad := flagSet{}.parse(args)
	if bad != "" || len(p.pos) == 0 {
		return f.flagError(bad)
	}
	return f.each(p.pos, func(st *State, ref string, c *Container) int {
		switch {
		case c == nil:
			f.notFound(ref)
			return f.notFoundCode()
		case pause && c.State == "paused":
			return f.stateErr(fmt.Sprintf("Container %s is already paused", c.ID), fmt.Sprintf("%q is already paused", c.ID))
		case !pause && c.State != "paused":
			return f.stateErr(fmt.Sprintf("Container %s is not paused", c.ID), fmt.Sprintf("%q is not paused, can't unpause", c.ID))
		case pause && c.State != "running":
			return f.stateErr(fmt.Sprintf("Container %s is not running", c.ID), fmt.Sprintf("%q is not running, can't pause", c.ID))
		}
		if pause {
			c.State = "paused"
		} else {
			c.State = "running"
		}
		fmt.Fprintln(f.stdout, ref)
		return 0
	})
}

func (f *fake) stateErr(dockerMsg, podmanMsg string) int {
	if f.dialect == "podman" {
		fmt.Fprintf(f.stderr, "Error: %s: container state improper\n", podmanMsg)
		return 125
	}
	fmt.Fprintf(f.stderr, "Error response from daemon: %s\n", dockerMsg)
	return 1
}
