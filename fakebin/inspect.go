package fakebin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"
	"time"
)

// The fake's inspect: a container's object as each engine prints it.

var inspectFlags = flagSet{values: set("--format", "-f", "--type"), bools: set("-s", "--size", "-l", "--latest")}

func (f *fake) inspect(args []string) int {
	p, bad := inspectFlags.parse(args)
	if bad != "" {
		return f.flagError(bad)
	}
	if len(p.pos) == 0 {
		return f.usage(`"inspect" requires at least 1 argument`)
	}
	var found []*Container
	var missing []string
	err := f.st.view(func(st *State) error {
		for _, ref := range p.pos {
			if c := st.find(ref); c != nil {
				found = append(found, c)
			} else {
				missing = append(missing, ref)
			}
		}
		return nil
	})
	if err != nil {
		return f.fail(err)
	}
	objs := make([]map[string]any, 0, len(found))
	for _, c := range found {
		objs = append(objs, f.inspectObject(c))
	}
	if format := p.last("--format", "-f"); format != "" {
		tmpl, err := template.New("inspect").Funcs(template.FuncMap{"json": toJSON}).Parse(format)
		if err != nil {
			fmt.Fprintf(f.stderr, "Error: template parsing error: %v\n", err)
			return 125
		}
		for _, o := range objs {
			var b bytes.Buffer
			if err := tmpl.Execute(&b, o); err == nil {
				fmt.Fprintln(f.stdout, b.String())
			}
		}
	} else {
		b, _ := json.MarshalIndent(objs, "", "    ")
		fmt.Fprintln(f.stdout, string(b))
	}
	for _, ref := range missing {
		f.notFound(ref)
	}
	if len(missing) > 0 {
		return f.notFoundCode()
	}
	return 0
}

func rfc(t time.Time) string {
	if t.IsZero() {
		return "0001-01-01T00:00:00Z"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func (f *fake) inspectObject(c *Container) map[string]any {
	name := c.Name
	image := c.Image
	if f.dialect == "docker" {
		name = "/" + name
	} else {
		image = f.podmanImage(image)
	}
	labels := c.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	path, cargs := "", []string{}
	if len(c.Cmd) > 0 {
		path, cargs = c.Cmd[0], c.Cmd[1:]
	}
	o := map[string]any{
		"Id": c.ID, "Created": rfc(c.Created), "Path": path, "Args": cargs,
		"State": map[string]any{
			"Status": c.State, "Running": c.State == "running" || c.State == "paused", "Paused": c.State == "paused",
			"Restarting": false, "OOMKilled": false, "Dead": c.State == "dead", "Pid": 0, "ExitCode": c.ExitCode,
			"Error": "", "StartedAt": rfc(c.StartedAt), "FinishedAt": f.finishedAt(c),
		},
		"Image": strings.Repeat("9c", 32), "Name": name,
		"Config":     map[string]any{"Image": image, "Labels": labels, "Env": c.Env, "Cmd": c.Cmd, "WorkingDir": c.WorkDir, "User": c.User},
		"HostConfig": map[string]any{"Init": c.Init, "NetworkMode": networkMode(c, f.dialect), "Runtime": runtimeOf(c)},
		"ExecIDs":    f.execIDs(c),
	}
	if f.dialect == "podman" {
		o["ImageName"] = image
		// podman names the runtime at the top (a name or the path given)
		// and says "oci" in HostConfig (captured).
		o["OCIRuntime"] = runtimeOf(c)
		o["HostConfig"].(map[string]any)["Runtime"] = "oci"
	}
	return o
}

// finishedAt is FinishedAt as inspect prints it;
// FAKEENGINE_INSPECT_FINISHEDAT
// overrides it for every container (garbage, the zero value, another format).
func (f *fake) finishedAt(c *Container) string {
	if v := f.env["FAKEENGINE_INSPECT_FINISHEDAT"]; v != "" {
		return v
	}
	return rfc(c.FinishedAt)
}

// networkMode is HostConfig.NetworkMode: the --network the container was
// run with, else the engine's default (docker "default", podman "bridge";
// measured).
func networkMode(c *Container, dialect string) string {
	p, _ := runFlags.parse(c.RunArgs)
	if m := p.last("--network", "--net"); m != "" {
		return m
	}
	if dialect == "podman" {
		return "bridge"
	}
	return "default"
}

// execIDs lists the container's exec sessions: the live ones, and on
// podman those that failed to start; docker prints null, podman [] when
// there are none (measured).
func (f *fake) execIDs(c *Container) any {
	var ids []string
	for _, e := range c.Execs {
		if (e.Stale && f.dialect == "podman") || (!e.Stale && alive(e.Pid)) {
			ids = append(ids, e.ID)
		}
	}
	if len(ids) == 0 && f.dialect == "docker" {
		return nil
	}
	if ids == nil {
		ids = []string{}
	}
	return ids
}

// imageInspect is `image inspect REF`: the images the fake has, with the
// entrypoint FAKEENGINE_IMAGE_ENTRYPOINT gives ("IMAGE=/init,..."; null
// otherwise, as for the busybox images).
func (f *fake) imageInspect(args []string) int {
	p, bad := inspectFlags.parse(args)
	if bad != "" || len(p.pos) == 0 {
		return f.flagError(bad)
	}
	var objs []any
	status := 0
	for _, ref := range p.pos {
		var im *Image
		_ = f.st.view(func(st *State) error { im = st.committed(ref); return nil })
		if im != nil {
			objs = append(objs, imageObject(im, f.dialect))
			continue
		}
		if !f.haveImage(ref) {
			if f.dialect == "podman" {
				fmt.Fprintf(f.stderr, "Error: inspecting object: %s: image not known\n", ref)
				status = 125
			} else {
				fmt.Fprintf(f.stderr, "Error: No such image: %s\n", ref)
				status = 1
			}
			continue
		}
		var ep any
		for _, kv := range strings.Split(f.env["FAKEENGINE_IMAGE_ENTRYPOINT"], ",") {
			if img, e, ok := strings.Cut(kv, "="); ok && normImage(img) == normImage(ref) {
				ep = []string{e}
			}
		}
		sum := sha256.Sum256([]byte(normImage(ref)))
		id := hex.EncodeToString(sum[:])
		if f.dialect == "docker" {
			id = "sha256:" + id
		}
		objs = append(objs, map[string]any{"Id": id, "Size": imageSizeBase, "Config": map[string]any{"Entrypoint": ep, "Cmd": nil}})
	}
	if objs == nil {
		objs = []any{}
	}
	b, _ := json.MarshalIndent(objs, "", "    ")
	fmt.Fprintln(f.stdout, string(b))
	return status
}
