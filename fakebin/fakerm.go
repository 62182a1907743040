package fakebin

import (
	"fmt"
	"strings"
)

// The fake's rm, and the storage a removed container leaves behind.

func (f *fake) rm(args []string) int {
	p, bad := flagSet{bools: set("-f", "--force", "-v", "--volumes", "--storage")}.parse(args)
	if bad != "" || len(p.pos) == 0 || p.has("--storage") && f.dialect != "podman" {
		return f.flagError(bad)
	}
	if p.has("--storage") {
		return f.rmStorage(p.pos)
	}
	force := p.has("-f", "--force")
	if f.dialect == "podman" && len(p.pos) > 1 {
		// podman 4.3: a missing name in a batch removes nothing at all;
		// `rm -f` then exits 0 silently, plain `rm` names the missing one
		// and exits 1 (measured).
		var missing []string
		_ = f.st.view(func(st *State) error {
			for _, ref := range p.pos {
				if st.find(ref) == nil {
					missing = append(missing, ref)
				}
			}
			return nil
		})
		if len(missing) > 0 {
			if force {
				return 0
			}
			f.notFound(missing[0])
			return 1
		}
	}
	return f.each(p.pos, func(st *State, ref string, c *Container) int {
		switch {
		case c == nil:
			if f.dialect == "podman" && force {
				return 0
			}
			f.notFound(ref)
			if force {
				return 0
			}
			return 1
		case refused(f.env["FAKEENGINE_RM_REFUSE"], ref, c):
			if f.dialect == "podman" {
				fmt.Fprintf(f.stderr, "Error: removing container %s: container is being removed: container state improper\n", c.ID)
				return 125
			}
			fmt.Fprintf(f.stderr, "Error response from daemon: removal of container %s is already in progress\n", c.ID)
			return 1
		case !force && c.State == "created" && f.env["FAKEENGINE_RM_STARTS_CREATED"] == "1":
			// the start a killed client had asked for lands first
			c.State, c.StartedAt = "running", f.now
			fmt.Fprintf(f.stderr, "Error response from daemon: You cannot remove a running container %s. Stop the container before attempting removal or force remove\n", c.ID)
			return 1
		case !force && (c.State == "running" || c.State == "paused"):
			if f.dialect == "podman" {
				fmt.Fprintf(f.stderr, "Error: cannot remove container %s as it is running - running or paused containers cannot be removed without force: container state improper\n", c.ID)
				return 2
			}
			fmt.Fprintf(f.stderr, "Error response from daemon: You cannot remove a running container %s. Stop the container before attempting removal or force remove\n", c.ID)
			return 1
		}
		killExecs(c, "")
		st.remove(c)
		fmt.Fprintln(f.stdout, ref)
		return 0
	})
}

// refused reports whether FAKEENGINE_RM_REFUSE (comma-separated names)
// names the container.
func refused(list, ref string, c *Container) bool {
	for _, n := range strings.Split(list, ",") {
		if n != "" && (n == ref || n == c.Name || n == c.ID) {
			return true
		}
		if sub, ok := strings.CutPrefix(n, "~"); ok && sub != "" && strings.Contains(c.Name, sub) {
			return true
		}
	}
	return false
}

// rmStorage is podman's `rm --storage REF...`: it removes storage-only
// containers, and a listed container too (measured on 4.3 for exited and
// created ones; a running one is refused here, unmeasured); a missing one
// is "no such container", exit 1.
func (f *fake) rmStorage(refs []string) int {
	code := 0
	_ = f.st.update(func(st *State) error {
		for _, ref := range refs {
			if c := st.find(ref); c != nil {
				if c.State == "running" || c.State == "paused" {
					fmt.Fprintf(f.stderr, "Error: container %q is running: container state improper\n", ref)
					code = 2
					continue
				}
				st.remove(c)
				fmt.Fprintln(f.stdout, ref)
				continue
			}
			found := false
			for name, id := range st.Storage {
				if ref == name || ref == id {
					delete(st.Storage, name)
					fmt.Fprintln(f.stdout, ref)
					found = true
				}
			}
			if !found {
				f.notFound(ref)
				code = 1
			}
		}
		return nil
	})
	return code
}
