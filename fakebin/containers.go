package fakebin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"text/template"
	"time"
)

// flagSet parses engine-style flags: --name v, --name=v, -n v, combined
// short booleans (-dit). Parsing stops at the first positional argument.
type flagSet struct {
	values map[string]bool // flags that take a value
	bools  map[string]bool
}

type parsed struct {
	vals map[string][]string
	pos  []string
}

func (p parsed) last(names ...string) string {
	for _, n := range names {
		if v := p.vals[n]; len(v) > 0 {
			return v[len(v)-1]
		}
	}
	return ""
}

func (p parsed) has(names ...string) bool {
	for _, n := range names {
		if _, ok := p.vals[n]; ok {
			return true
		}
	}
	return false
}

func (fs flagSet) parse(args []string) (parsed, string) {
	p := parsed{vals: map[string][]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			p.pos = args[i+1:]
			return p, ""
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			p.pos = args[i:]
			return p, ""
		}
		name, val, hasVal := strings.Cut(a, "=")
		switch {
		case fs.values[name]:
			if !hasVal {
				if i+1 >= len(args) {
					return p, fmt.Sprintf("flag needs an argument: %s", name)
				}
				i++
				val = args[i]
			}
			p.vals[name] = append(p.vals[name], val)
		case fs.bools[name]:
			p.vals[name] = append(p.vals[name], "true")
		case !strings.HasPrefix(a, "--") && len(a) > 2:
			for _, c := range a[1:] {
				n := "-" + string(c)
				if !fs.bools[n] {
					return p, fmt.Sprintf("unknown shorthand flag: %q in %s", string(c), a)
				}
				p.vals[n] = append(p.vals[n], "true")
			}
		default:
			return p, "unknown flag: " + name
		}
	}
	return p, ""
}

func set(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

var psFlags = flagSet{values: set("--format", "--filter", "-f", "-n", "--last"), bools: set("-a", "--all", "--no-trunc", "-q", "--quiet", "-s", "--size", "--latest", "-l", "--noheading")}

func (f *fake) ps(args []string) int {
	p, bad := psFlags.parse(args)
	if bad != "" || len(p.pos) > 0 {
		return f.flagError(bad)
	}
	all := p.has("-a", "--all")
	var filters []string
	filters = append(filters, p.vals["--filter"]...)
	filters = append(filters, p.vals["-f"]...)
	var cs []*Container
	err := f.st.view(func(st *State) error {
		for _, c := range st.sorted() {
			if !all && c.State != "running" && c.State != "paused" {
				continue
			}
			ok, ferr := matchFilters(c, filters)
			if ferr != "" {
				return fmt.Errorf("%s", ferr)
			}
			if ok {
				cs = append(cs, c)
			}
		}
		return nil
	})
	if err != nil {
		if strings.HasPrefix(err.Error(), "invalid filter") {
			fmt.Fprintf(f.stderr, "Error: %v\n", err)
			if f.dialect == "podman" {
				return 125
			}
			return 1
		}
		return f.fail(err)
	}
	format := p.last("--format")
	noTrunc := p.has("--no-trunc")
	if p.has("-q", "--quiet") {
		format = "{{.ID}}"
	}
	switch {
	case f.dialect == "podman" && (format == "json" || format == "{{json .}}"):
		entries := make([]any, 0, len(cs))
		for _, c := range cs {
			entries = append(entries, f.podmanPS(c))
		}
		b, _ := json.MarshalIndent(entries, "", "  ")
		fmt.Fprintln(f.stdout, string(b))
	case f.dialect == "docker" && (format == "json" || format == "{{json .}}"):
		for _, c := range cs {
			b, _ := json.Marshal(f.dockerPS(c, noTrunc))
			fmt.Fprintln(f.stdout, string(b))
		}
	case format != "":
		tmpl, err := template.New("ps").Funcs(template.FuncMap{"json": toJSON}).Parse(format)
		if err != nil {
			fmt.Fprintf(f.stderr, "Error: template parsing error: %v\n", err)
			return 125
		}
		for _, c := range cs {
			var b bytes.Buffer
			if err := tmpl.Execute(&b, f.dockerPS(c, noTrunc)); err != nil {
				fmt.Fprintf(f.stderr, "Error: template: %v\n", err)
				return 125
			}
			fmt.Fprintln(f.stdout, b.String())
		}
	default:
		fmt.Fprintln(f.stdout, "CONTAINER ID   IMAGE   COMMAND   CREATED   STATUS   PORTS   NAMES")
		for _, c := range cs {
			fmt.Fprintf(f.stdout, "%s   %s   %q   %s   %s       %s\n", c.ID[:12], c.Image, strings.Join(c.Cmd, " "), ago(f.now, c.Created), f.status(c), c.Name)
		}
	}
	return 0
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

var validStatus = set("created", "restarting", "running", "removing", "paused", "exited", "dead")

// matchFilters applies ps --filter values; all must match. A second filter
// on the same key ORs for status and name, ANDs for label, as the engines do.
func matchFilters(c *Container, filters []string) (bool, string) {
	byKey := map[string][]string{}
	for _, fl := range filters {
		k, v, ok := strings.Cut(fl, "=")
		if !ok {
			return false, fmt.Sprintf("invalid filter %q", fl)
		}
		byKey[k] = append(byKey[k], v)
	}
	for k, vs := range byKey {
		switch k {
		case "label":
			for _, v := range vs {
				lk, lv, hasV := strings.Cut(v, "=")
				got, present := c.Labels[lk]
				if !present || (hasV && got != lv) {
					return false, ""
				}
			}
		case "status":
			matched := false
			for _, v := range vs {
				if !validStatus[v] {
					return false, fmt.Sprintf("invalid filter 'status=%s'", v)
				}
				matched = matched || c.State == v
			}
			if !matched {
				return false, ""
			}
		case "name":
			matched := false
			for _, v := range vs {
				re, err := regexp.Compile(v)
				matched = matched || (err == nil && re.MatchString(c.Name))
			}
			if !matched {
				return false, ""
			}
		case "id":
			matched := false
			for _, v := range vs {
				matched = matched || strings.HasPrefix(c.ID, v)
			}
			if !matched {
				return false, ""
			}
		default:
			return false, fmt.Sprintf("invalid filter %q", k)
		}
	}
	return true, ""
}

// dockerPSLine mirrors `docker ps --format '{{json .}}'` (keys in docker's order).
type dockerPSLine struct {
	Command      string
	CreatedAt    string
	ID           string
	Image        string
	Labels       string
	LocalVolumes string
	Mounts       string
	Names        string
	Networks     string
	Ports        string
	RunningFor   string
	Size         string
	State        string
	Status       string
}

func (f *fake) dockerPS(c *Container, noTrunc bool) dockerPSLine {
	id := c.ID
	if !noTrunc {
		id = id[:12]
	}
	var labels []string
	for _, k := range sortedKeys(c.Labels) {
		labels = append(labels, k+"="+c.Labels[k])
	}
	return dockerPSLine{
		Command: fmt.Sprintf("%q", strings.Join(c.Cmd, " ")), CreatedAt: c.Created.Format("2006-01-02 15:04:05 -0700 MST"),
		ID: id, Image: c.Image, Labels: strings.Join(labels, ","), LocalVolumes: "0", Names: c.Name,
		Networks: "none", RunningFor: ago(f.now, c.Created), Size: "0B", State: c.State, Status: f.status(c),
	}
}

func (f *fake) podmanPS(c *Container) map[string]any {
	var labels any
	if len(c.Labels) > 0 {
		labels = c.Labels
	}
	return map[string]any{
		"AutoRemove": false, "Command": c.Cmd, "CreatedAt": ago(f.now, c.Created),
		"Exited": c.State == "exited", "ExitedAt": unixOrNever(c.FinishedAt), "ExitCode": c.ExitCode,
		"Id": c.ID, "Image": f.podmanImage(c.Image), "ImageID": strings.Repeat("9c", 32), "IsInfra": false,
		"Labels": labels, "Mounts": []string{}, "Names": []string{c.Name}, "Namespaces": map[string]any{},
		"Networks": []string{}, "Pid": 0, "Pod": "", "PodName": "", "Ports": nil, "Size": nil,
		"StartedAt": unixOrNever(c.StartedAt), "State": c.State, "Status": f.status(c), "Created": c.Created.Unix(),
	}
}

func unixOrNever(t time.Time) int64 {
	if t.IsZero() {
		return -62135596800
	}
	return t.Unix()
}

func (f *fake) podmanImage(img string) string {
	if strings.Contains(img, "/") {
		return img
	}
	if !strings.Contains(img, ":") {
		img += ":latest"
	}
	return "localhost/" + img
}

func (f *fake) status(c *Container) string {
	switch c.State {
	case "running":
		return "Up " + strings.TrimSuffix(ago(f.now, c.StartedAt), " ago")
	case "paused":
		return "Up " + strings.TrimSuffix(ago(f.now, c.StartedAt), " ago") + " (Paused)"
	case "exited":
		return fmt.Sprintf("Exited (%d) %s", c.ExitCode, ago(f.now, c.FinishedAt))
	case "created":
		return "Created"
	}
	return c.State
}

func ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "Less than a second ago"
	case d < time.Minute:
		return fmt.Sprintf("%d seconds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d minutes ago", int(d.Minutes()))
	}
	return fmt.Sprintf("%d hours ago", int(d.Hours()))
}

func (f *fake) flagError(msg string) int {
	if msg == "" {
		msg = "accepts no arguments"
	}
	if f.dialect == "podman" {
		fmt.Fprintf(f.stderr, "Error: %s\nSee 'podman %s --help'\n", msg, f.sub)
		return 125
	}
	fmt.Fprintf(f.stderr, "%s\n\nUsage:  docker %s [OPTIONS]\n\nRun 'docker %s --help' for more information\n", msg, f.sub, f.sub)
	if f.sub == "run" || f.sub == "create" {
		return 125
	}
	return 1
}
