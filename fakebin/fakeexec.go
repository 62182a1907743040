package fakebin

import (
	"fmt"
	"strconv"
	"strings"
)

// The fake's exec: a command in a container as the engine runs it, its
// user checked, and the OCI runtime's refusals.

var execFlags = flagSet{values: set("-w", "--workdir", "-u", "--user", "-e", "--env", "--detach-keys", "--env-file"),
	bools: set("-i", "--interactive", "-t", "--tty", "-d", "--detach", "--privileged")}

func (f *fake) exec(args []string) int {
	p, bad := execFlags.parse(args)
	if bad != "" {
		return f.flagError(bad)
	}
	if len(p.pos) < 2 {
		if f.dialect == "podman" {
			fmt.Fprintln(f.stderr, "Error: must provide a non-empty command to start an exec session: invalid argument")
			return 125
		}
		fmt.Fprintf(f.stderr, "docker: 'exec' requires at least 2 arguments\n\nRun 'docker exec --help' for more information\n")
		return 1
	}
	ref, cmd := p.pos[0], p.pos[1:]
	var c *Container
	if err := f.st.view(func(st *State) error {
		if found := st.find(ref); found != nil {
			cp := *found
			c = &cp
		}
		return nil
	}); err != nil {
		return f.fail(err)
	}
	switch {
	case c == nil:
		f.notFound(ref)
		return f.notFoundCode()
	case c.State == "paused" && f.dialect == "docker":
		fmt.Fprintf(f.stderr, "Error response from daemon: Container %s is paused, unpause the container before exec\n", ref)
		return 1
	case c.State != "running":
		if f.dialect == "podman" {
			fmt.Fprintln(f.stderr, "Error: can only create exec sessions on running containers: container state improper")
			return 255
		}
		fmt.Fprintf(f.stderr, "Error response from daemon: Container %s is not running\n", c.ID)
		return 1
	}
	env := append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME=" + c.ID[:12]}, c.Env...)
	fileEnv, err := f.envFiles(p.vals["--env-file"])
	if err != nil {
		fmt.Fprintln(f.stderr, err)
		return 125
	}
	env = append(env, fileEnv...)
	for _, e := range append(p.vals["-e"], p.vals["--env"]...) {
		if k, _, ok := strings.Cut(e, "="); ok && k != "" {
			env = append(env, e)
		} else if v, ok := f.env[e]; ok {
			env = append(env, e+"="+v)
		}
	}
	if u := p.last("-u", "--user"); u != "" {
		home, ok := fakeUser(u)
		if !ok {
			return f.userRefused(u)
		}
		env = append([]string{"HOME=" + home}, env...) // an -e HOME comes later and wins
		env = append(env, "FAKEENGINE_EXEC_USER="+u)
	}
	wd := p.last("-w", "--workdir")
	if wd == "" {
		wd = c.WorkDir
	}
	if !knownDir(c, wd) {
		f.staleSession(c.ID, cmd)
		return f.ociError(fmt.Sprintf("chdir to cwd (%q) set in config.json failed: no such file or directory", wd), 127)
	}
	if len(cmd) >= 2 && (cmd[1] == "snapshot-hold" || cmd[1] == "snapshot-restore") {
		return f.snapshotMode(cmd, f.stdin)
	}
	return f.runExec(c, cmd, wd, env)
}

// fakeUser is exec --user against the passwd and group files of the
// test images (busybox's: root 0:0 /root, nobody 65534:65534 /; groups
// root, nogroup): a uid it does not list is taken as it is, HOME /. The
// fake runs the command as itself (it cannot switch user); it passes
// the user on as FAKEENGINE_EXEC_USER.
func fakeUser(spec string) (home string, ok bool) {
	name, group, _ := strings.Cut(spec, ":")
	homes := map[string]string{"root": "/root", "0": "/root", "nobody": "/", "65534": "/"}
	home, known := homes[name]
	if !known {
		if _, err := strconv.ParseUint(name, 10, 32); err != nil {
			return "", false
		}
		home = "/"
	}
	if group != "" && group != "root" && group != "nogroup" {
		if _, err := strconv.ParseUint(group, 10, 32); err != nil {
			return "", false
		}
	}
	return home, true
}

// userRefused is the engines' refusal of a user or group the image's
// files do not list (captured: docker 20.10 on stdout, exit 126; podman
// 4.3 on stderr after "Error: ", exit 255).
func (f *fake) userRefused(spec string) int {
	name, group, _ := strings.Cut(spec, ":")
	msg := fmt.Sprintf("unable to find user %s: no matching entries in passwd file", name)
	if _, ok := fakeUser(name); ok {
		msg = fmt.Sprintf("unable to find group %s: no matching entries in group file", group)
	}
	if f.dialect == "podman" {
		fmt.Fprintln(f.stderr, "Error: "+msg)
		return 255
	}
	fmt.Fprintln(f.stdout, msg)
	return 126
}

// knownDirs exist in every fake container; the container's workdir and
// mount targets are added.
var knownDirs = set("/", "/root", "/tmp", "/var/tmp", "/run", "/etc", "/bin", "/home", "/workspace", "/usr", "/var")

func knownDir(c *Container, d string) bool {
	if knownDirs[d] || d == c.WorkDir {
		return true
	}
	for i, a := range c.RunArgs {
		if (a == "-v" || a == "--volume") && i+1 < len(c.RunArgs) {
			parts := strings.Split(c.RunArgs[i+1], ":")
			if len(parts) >= 2 && strings.HasPrefix(d, parts[1]) {
				return true
			}
		}
	}
	return false
}

// ociError prints the runtime's failure to start a process the way each
// engine does: docker on stdout with status 126, podman on stderr with 126
// (permission) or 127 (not found).
func (f *fake) ociError(what string, podmanCode int) int {
	if f.dialect == "podman" {
		suffix := "OCI runtime attempted to invoke a command that was not found"
		if podmanCode == 126 {
			suffix = "OCI permission denied"
		}
		fmt.Fprintf(f.stderr, "Error: runc: exec failed: unable to start container process: %s: %s\n", what, suffix)
		return podmanCode
	}
	fmt.Fprintf(f.stdout, "OCI runtime exec failed: exec failed: unable to start container process: %s: unknown\n", what)
	return 126
}
