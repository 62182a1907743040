package fakebin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Volume is one fake named volume (docker and podman `volume`).
type Volume struct {
	Name    string            `json:"name"`
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created"`
}

// volume runs `volume create|inspect|ls|rm` with both engines' words and
// statuses (captured: volume_*).
func (f *fake) volume(args []string) int {
	if len(args) == 0 {
		return f.usage("volume: missing command")
	}
	switch args[0] {
	case "create":
		return f.volumeCreate(args[1:])
	case "inspect":
		return f.volumeInspect(args[1:])
	case "ls", "list":
		return f.volumeLs(args[1:])
	case "rm", "remove":
		return f.volumeRm(args[1:])
	}
	return f.usage(fmt.Sprintf("unknown command %q for \"%s volume\"", args[0], f.name))
}

var volumeFlags = flagSet{values: set("--label", "-l", "--driver", "-d", "--opt", "-o", "--filter", "-f", "--format"), bools: set("-q", "--quiet", "--force")}

func (f *fake) volumeCreate(args []string) int {
	p, bad := volumeFlags.parse(args)
	if bad != "" || len(p.pos) != 1 {
		return f.usage("volume create: want [--label K=V]... NAME")
	}
	name := p.pos[0]
	labels := map[string]string{}
	for _, l := range append(p.vals["--label"], p.vals["-l"]...) {
		k, v, _ := strings.Cut(l, "=")
		labels[k] = v
	}
	exists := false
	_ = f.st.update(func(st *State) error {
		if st.volume(name) != nil {
			exists = true
			return nil
		}
		st.Volumes = append(st.Volumes, &Volume{Name: name, Labels: labels, Created: f.now})
		return nil
	})
	if exists && f.dialect == "podman" {
		fmt.Fprintf(f.stderr, "Error: volume with name %s already exists: volume already exists\n", name)
		return 125
	}
	fmt.Fprintln(f.stdout, name) // docker: a name that exists, quietly, labels unchanged
	return 0
}

func (st *State) volume(name string) *Volume {
	for _, v := range st.Volumes {
		if v.Name == name {
			return v
		}
	}
	return nil
}

func (f *fake) volumeJSON(v *Volume) map[string]any {
	mp := f.st.path("volumes/" + v.Name + "/_data")
	var labels any = v.Labels
	if len(v.Labels) == 0 {
		labels = nil // docker: null
		if f.dialect == "podman" {
			labels = map[string]string{}
		}
	}
	m := map[string]any{"Name": v.Name, "Driver": "local", "Mountpoint": mp, "Labels": labels, "Scope": "local", "Options": nil}
	if f.dialect == "podman" {
		m["CreatedAt"] = v.Created.Format(time.RFC3339Nano)
		m["Options"], m["MountCount"], m["NeedsCopyUp"] = map[string]string{}, 0, true
	} else {
		m["CreatedAt"] = v.Created.Format(time.RFC3339)
	}
	return m
}

func (f *fake) volumeInspect(args []string) int {
	p, bad := volumeFlags.parse(args)
	if bad != "" || len(p.pos) == 0 {
		return f.usage("volume inspect: want NAME...")
	}
	out := []map[string]any{}
	var missing []string
	_ = f.st.view(func(st *State) error {
		for _, n := range p.pos {
			if v := st.volume(n); v != nil {
				out = append(out, f.volumeJSON(v))
			} else {
				missing = append(missing, n)
			}
		}
		return nil
	})
	b, _ := json.MarshalIndent(out, "", "    ")
	fmt.Fprintln(f.stdout, string(b))
	if len(missing) == 0 {
		return 0
	}
	if f.dialect == "podman" {
		fmt.Fprintf(f.stderr, "Error: inspecting object: no such volume %s\n", missing[0])
		return 125
	}
	for _, n := range missing {
		fmt.Fprintf(f.stderr, "Error response from daemon: get %s: no such volume\n", n)
	}
	return 1
}

func (f *fake) volumeLs(args []string) int {
	p, bad := volumeFlags.parse(args)
	if bad != "" || !p.has("-q", "--quiet") {
		return f.usage("volume ls: the fake engine lists names only (-q), by --filter label=K=V")
	}
	_ = f.st.view(func(st *State) error {
		for _, v := range st.Volumes {
			ok := true
			for _, flt := range append(p.vals["--filter"], p.vals["-f"]...) {
				kv, isLabel := strings.CutPrefix(flt, "label=")
				k, want, hasValue := strings.Cut(kv, "=")
				got, has := v.Labels[k]
				ok = ok && isLabel && has && (!hasValue || got == want)
			}
			if ok {
				fmt.Fprintln(f.stdout, v.Name)
			}
		}
		return nil
	})
	return 0
}

// mountedBy is the container that mounts volume name, if any.
func (st *State) mountedBy(name string) *Container {
	for _, c := range st.Containers {
		if slices.Contains(volumeSources(c.RunArgs), name) {
			return c
		}
	}
	return nil
}

// volumeSources are the named volumes run args mount (--mount
// type=volume,source=NAME,...).
func volumeSources(args []string) []string {
	var out []string
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--mount=")
		if !ok && a == "--mount" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if !ok {
			continue
		}
		opts := map[string]string{}
		for _, o := range strings.Split(v, ",") {
			k, val, _ := strings.Cut(o, "=")
			opts[k] = val
		}
		src := opts["source"]
		if src == "" {
			src = opts["src"]
		}
		if opts["type"] == "volume" && src != "" {
			out = append(out, src)
		}
	}
	return out
}

// makeVolumes makes the named volumes run args mount that do not exist,
// without labels (both engines; podman refuses volume-label).
func (st *State) makeVolumes(args []string, now time.Time) {
	for _, n := range volumeSources(args) {
		if st.volume(n) == nil {
			st.Volumes = append(st.Volumes, &Volume{Name: n, Created: now})
		}
	}
}

func (f *fake) volumeRm(args []string) int {
	p, bad := volumeFlags.parse(args)
	if bad != "" || len(p.pos) == 0 {
		return f.usage("volume rm: want NAME...")
	}
	code := 0
	_ = f.st.update(func(st *State) error {
		for _, n := range p.pos {
			v := st.volume(n)
			switch c := st.mountedBy(n); {
			case v == nil && f.dialect == "podman":
				fmt.Fprintf(f.stderr, "Error: no volume with name %q found: no such volume\n", n)
				code = 1
			case v == nil:
				fmt.Fprintf(f.stderr, "Error response from daemon: get %s: no such volume\n", n)
				code = 1
			case c != nil && f.dialect == "podman":
				fmt.Fprintf(f.stderr, "Error: volume %s is being used by the following container(s): %s: volume is being used\n", n, c.ID)
				code = 2
			case c != nil:
				fmt.Fprintf(f.stderr, "Error response from daemon: remove %s: volume is in use - [%s]\n", n, c.ID)
				code = 1
			default:
				st.Volumes = slices.DeleteFunc(st.Volumes, func(x *Volume) bool { return x.Name == n })
				fmt.Fprintln(f.stdout, n)
			}
		}
		return nil
	})
	return code
}
