package fakebin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Image is one image `commit` made (the fake's built-in images are
// FAKEENGINE_IMAGES, which have no state).
type Image struct {
	ID      string            `json:"id"`  // 64 hex digits
	Ref     string            `json:"ref"` // normImage'd name
	Labels  map[string]string `json:"labels"`
	Env     []string          `json:"env"`
	Parent  string            `json:"parent"` // the image its container was made from (an id, or a built-in's name)
	Created time.Time         `json:"created"`
	Size    int64             `json:"size"`
}

// committed finds a committed image by name or id ("sha256:" or not).
func (st *State) committed(ref string) *Image {
	id := strings.TrimPrefix(ref, "sha256:")
	for _, im := range st.Images {
		if im.ID == id || len(id) >= 12 && strings.HasPrefix(im.ID, id) || im.Ref == normImage(ref) {
			return im
		}
	}
	return nil
}

// imageSizeBase is what every image weighs in the fake: a built-in's size
// (a commit adds FAKEENGINE_COMMIT_SIZE bytes, default 4096).
const imageSizeBase = 2131015

// commitFlags are each engine's: docker's commit has no -q (captured:
// it refuses it).
func commitFlags(dialect string) flagSet {
	fs := flagSet{values: set("--change", "-c", "--message", "-m", "--author", "-a", "--pause"), bools: set("-p")}
	if dialect == "podman" {
		fs.values["--format"], fs.values["-f"] = true, true
		fs.bools["-q"], fs.bools["--quiet"] = true, true
	}
	return fs
}

// commit is `commit [--pause=BOOL] [-q] [--change "LABEL k=v" | "ENV k=v"]...
// CONTAINER REF`: an image with the container's labels and environment
// changed as told, as both engines make (captured: the container's labels
// and variables go into the image). FAKEENGINE_COMMIT_LEAVES=1 makes the
// image and then fails, as a client killed while the engine finished.
func (f *fake) commit(args []string) int {
	p, bad := commitFlags(f.dialect).parse(args)
	if bad != "" {
		return f.flagError(bad)
	}
	if len(p.pos) != 2 {
		return f.usage(fmt.Sprintf("\"%s commit\" requires 2 arguments here (CONTAINER REF)", f.name))
	}
	ref, name := p.pos[0], p.pos[1]
	var out string
	code := 0
	err := f.st.update(func(st *State) error {
		c := st.find(ref)
		if c == nil {
			code = -1
			return nil
		}
		if f.dialect == "podman" && p.last("--pause") == "true" && f.env["FAKEENGINE_ROOTLESS"] == "1" {
			code = 125 // captured: commit_pause, rootless podman on cgroups v1
			fmt.Fprintf(f.stderr, "Error: pausing container %q to commit: can not pause containers on rootless containers with cgroup V1: this container does not have a cgroup\n", c.ID)
			return nil
		}
		im := &Image{Ref: normImage(name), Labels: map[string]string{}, Parent: c.Image, Created: f.now, Size: imageSizeBase + 4096}
		if pi := st.committed(c.Image); pi != nil {
			im.Parent, im.Size = pi.ID, pi.Size+4096
		}
		for k, v := range c.Labels {
			im.Labels[k] = v
		}
		im.Env = append(im.Env, c.Env...)
		for _, ch := range append(p.vals["--change"], p.vals["-c"]...) {
			kind, kv, _ := strings.Cut(ch, " ")
			k, v, _ := strings.Cut(kv, "=")
			v = strings.Trim(v, `"`)
			switch kind {
			case "LABEL":
				im.Labels[k] = v
			case "ENV":
				im.Env = setEnv(im.Env, k, v)
			default:
				code = 125
				fmt.Fprintf(f.stderr, "Error: fake engine: unsupported change %q\n", ch)
				return nil
			}
		}
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%d/%d", c.ID, name, f.now.UnixNano(), st.Seq)))
		st.Seq++
		im.ID = hex.EncodeToString(sum[:])
		for _, old := range st.Images { // the name moves to the new image
			if old.Ref == im.Ref {
				old.Ref = ""
			}
		}
		st.Images = append(st.Images, im)
		out = im.ID
		return nil
	})
	switch {
	case err != nil:
		return f.fail(err)
	case code == -1:
		f.notFound(ref)
		return f.notFoundCode()
	case code != 0:
		return code
	}
	if f.env["FAKEENGINE_COMMIT_LEAVES"] == "1" {
		fmt.Fprintln(f.stderr, "Error: fake engine: the client went away while the engine committed")
		return 125
	}
	if f.dialect == "docker" {
		out = "sha256:" + out
	}
	fmt.Fprintln(f.stdout, out)
	return 0
}

func setEnv(env []string, k, v string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); name != k {
			out = append(out, kv)
		}
	}
	return append(out, k+"="+v)
}

// images is `image ls -q --no-trunc [--filter label=K[=V]]...` of the
// committed images (the built-in ones carry no labels), and `image rm
// ID...`: refused while a container is made from it or an image stands
// on it, in each engine's words (captured: image_rm_in_use).
func (f *fake) image(args []string) int {
	if len(args) == 0 {
		return f.usage("image: a subcommand is needed")
	}
	switch args[0] {
	case "ls", "list":
		return f.imageLs(args[1:])
	case "rm", "remove":
		return f.imageRm(args[1:])
	}
	return f.usage(fmt.Sprintf("unknown command %q for \"%s image\"", args[0], f.name))
}

var imageLsFlags = flagSet{values: set("--filter", "-f", "--format"), bools: set("-q", "--quiet", "--no-trunc", "-a", "--all")}

func (f *fake) imageLs(args []string) int {
	p, bad := imageLsFlags.parse(args)
	if bad != "" {
		return f.flagError(bad)
	}
	var ids []string
	err := f.st.view(func(st *State) error {
	images:
		for _, im := range st.Images {
			for _, flt := range append(p.vals["--filter"], p.vals["-f"]...) {
				l, ok := strings.CutPrefix(flt, "label=")
				if !ok {
					return fmt.Errorf("unsupported filter %q", flt)
				}
				k, v, hasV := strings.Cut(l, "=")
				got, has := im.Labels[k]
				if !has || hasV && got != v {
					continue images
				}
			}
			ids = append(ids, "sha256:"+im.ID)
		}
		return nil
	})
	if err != nil {
		return f.fail(err)
	}
	for i := len(ids) - 1; i >= 0; i-- { // newest first, as both engines list
		fmt.Fprintln(f.stdout, ids[i])
	}
	return 0
}

func (f *fake) imageRm(args []string) int {
	status := 0
	for _, ref := range args {
		var msg string
		code := 0
		err := f.st.update(func(st *State) error {
			im := st.committed(ref)
			if im == nil {
				code = 1
				if f.dialect == "podman" {
					msg = fmt.Sprintf("Error: %s: image not known", ref)
				} else {
					msg = fmt.Sprintf("Error response from daemon: No such image: %s", ref)
				}
				return nil
			}
			for _, c := range st.Containers {
				if c.Namespace == "" && st.committed(c.Image) == im && im.Ref != "" && normImage(ref) == im.Ref && f.dialect == "docker" {
					code = 1 // captured: image_rm_in_use, by name
					msg = fmt.Sprintf("Error response from daemon: conflict: unable to remove repository reference %q (must force) - container %.12s is using its referenced image %.12s", ref, c.ID, im.ID)
					return nil
				}
				if c.Namespace == "" && st.committed(c.Image) == im {
					code = 1
					msg = fmt.Sprintf("Error response from daemon: conflict: unable to delete %.12s (cannot be forced) - image is being used by running container %.12s", im.ID, c.ID)
					if f.dialect == "podman" {
						code, msg = 2, fmt.Sprintf("Error: image used by %s: image is in use by a container: consider listing external containers and force-removing image", c.ID)
					}
					return nil
				}
			}
			untagged := im.Ref
			if f.dialect == "podman" && untagged != "" && !strings.Contains(untagged, "/") {
				untagged = "localhost/" + untagged
			}
			if st.hasChild(im) {
				byID := strings.TrimPrefix(ref, "sha256:") != ref || len(ref) >= 12 && strings.HasPrefix(im.ID, ref)
				if f.dialect == "docker" && byID {
					code = 1 // measured: docker 20.10
					msg = fmt.Sprintf("Error response from daemon: conflict: unable to delete %.12s (cannot be forced) - image has dependent child images", im.ID)
					return nil
				}
				// By name (both, captured: image_rm_child) or podman by
				// id (measured): the name goes, the image stays under
				// the one standing on it.
				if im.Ref == "" {
					code, msg = 0, ""
					return nil
				}
				im.Ref = ""
				msg = "Untagged: " + untagged
				return nil
			}
			if im.Ref != "" {
				msg = "Untagged: " + untagged + "\n"
			}
			msg += st.dropImage(im)
			return nil
		})
		if err != nil {
			return f.fail(err)
		}
		if code != 0 {
			fmt.Fprintln(f.stderr, msg)
			status = code
			continue
		}
		if msg != "" {
			fmt.Fprintln(f.stdout, msg)
		}
	}
	return status
}

func (st *State) hasChild(im *Image) bool {
	for _, c := range st.Images {
		if c.Parent == im.ID {
			return true
		}
	}
	return false
}

// dropImage removes im, and then its parent when that has no name, no
// other child and no container left (both engines: a removed image's
// untagged parent goes with it, measured), and says what it deleted.
func (st *State) dropImage(im *Image) string {
	kept := st.Images[:0]
	for _, o := range st.Images {
		if o != im {
			kept = append(kept, o)
		}
	}
	st.Images = kept
	msg := "Deleted: sha256:" + im.ID
	if parent := st.committed(im.Parent); parent != nil && parent.Ref == "" && !st.hasChild(parent) && !st.usedByContainer(parent) {
		msg += "\n" + st.dropImage(parent)
	}
	return msg
}

func (st *State) usedByContainer(im *Image) bool {
	for _, c := range st.Containers {
		if c.Namespace == "" && st.committed(c.Image) == im {
			return true
		}
	}
	return false
}

// imageObject is a committed image as `image inspect` prints it.
func imageObject(im *Image, dialect string) map[string]any {
	id := im.ID
	if dialect == "docker" {
		id = "sha256:" + id
	}
	return map[string]any{"Id": id, "Created": im.Created.Format(time.RFC3339Nano), "Size": im.Size,
		"Config": map[string]any{"Entrypoint": nil, "Cmd": []string{"sleep", "infinity"}, "Labels": im.Labels, "Env": im.Env}}
}

// snapshotMode plays hsbx's agent's snapshot modes (the real ones stop
// the sandbox's processes, which here would be the host's): snapshot-hold
// reports its paths staged and waits for a line of input or its end;
// snapshot-restore reports them restored. FAKEENGINE_RESTORE_FAIL=KIND
// makes the restore fail with that kind (no_space, ...).
func (f *fake) snapshotMode(cmd []string, stdin io.Reader) int {
	enc := json.NewEncoder(f.stdout)
	switch cmd[1] {
	case "snapshot-hold":
		if len(cmd) < 3 {
			return 2
		}
		paths := cmd[3:]
		if paths == nil {
			paths = []string{}
		}
		_ = enc.Encode(map[string]any{"paths": paths, "bytes": 0, "files": 0, "frozen": 1})
		buf := make([]byte, 1)
		for {
			if n, err := stdin.Read(buf); err != nil || n == 1 && buf[0] == '\n' {
				break
			}
		}
		_ = enc.Encode(map[string]any{"bytes": 0, "files": 0, "thawed": 1})
		return 0
	case "snapshot-restore":
		if k := f.env["FAKEENGINE_RESTORE_FAIL"]; k != "" {
			_ = enc.Encode(map[string]any{"bytes": 0, "files": 0, "error": "fake engine: restore failed", "kind": k})
			return 1
		}
		_ = enc.Encode(map[string]any{"bytes": 0, "files": 0, "paths": []string{}})
		return 0
	}
	return 2
}
