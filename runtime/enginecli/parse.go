package enginecli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// rawInspect holds the fields hsbx reads from `container inspect`; docker
// and podman print the same keys (podman adds ImageName).
type rawInspect struct {
	ID        string    `json:"Id"`
	Name      string    `json:"Name"`
	Created   FlexTime  `json:"Created"`
	Image     string    `json:"Image"`
	ImageName string    `json:"ImageName"`
	State     *rawState `json:"State"`
	Config    *struct {
		Image  string            `json:"Image"`
		Labels map[string]string `json:"Labels"`
		Env    []string          `json:"Env"`
	} `json:"Config"`
	HostConfig *struct {
		NetworkMode string `json:"NetworkMode"`
		Runtime     string `json:"Runtime"` // docker's
	} `json:"HostConfig"`
	OCIRuntime string `json:"OCIRuntime"` // podman's
	// ExecIDs is null (docker) or [] (podman) when no exec runs.
	ExecIDs []string `json:"ExecIDs"`
}

type rawState struct {
	Status     string   `json:"Status"`
	Running    bool     `json:"Running"`
	Paused     bool     `json:"Paused"`
	Restarting bool     `json:"Restarting"`
	Dead       bool     `json:"Dead"`
	StartedAt  FlexTime `json:"StartedAt"`
	FinishedAt FlexTime `json:"FinishedAt"`
}

// ParseInspect parses `container inspect` output (a JSON array, the same
// shape for docker and podman) into Containers. Empty output is no containers.
func ParseInspect(out []byte) ([]runtime.Container, error) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return nil, nil
	}
	var raws []rawInspect
	if err := json.Unmarshal(out, &raws); err != nil {
		return nil, fmt.Errorf("inspect output is not a JSON array of containers: %w", err)
	}
	cs := make([]runtime.Container, 0, len(raws))
	for i, r := range raws {
		if r.ID == "" {
			return nil, fmt.Errorf("inspect entry %d has no Id", i)
		}
		c := runtime.Container{
			ID:      r.ID,
			Name:    strings.TrimPrefix(r.Name, "/"),
			Image:   r.Image,
			Created: r.Created.Time,
			State:   runtime.StateUnknown,
		}
		if r.ImageName != "" {
			c.Image = r.ImageName
		}
		if r.HostConfig != nil {
			c.NetworkMode = r.HostConfig.NetworkMode
			c.OCIRuntime = r.HostConfig.Runtime
		}
		if r.OCIRuntime != "" {
			c.OCIRuntime = r.OCIRuntime
		}
		if len(r.ExecIDs) > 0 {
			c.ExecIDs = r.ExecIDs
		}
		if r.Config != nil {
			if r.Config.Image != "" {
				c.Image = r.Config.Image
			}
			c.Labels = r.Config.Labels
			c.EnvNames = envNames(r.Config.Env)
		}
		if r.State != nil {
			c.State = NormalizeState(r.State.Status)
			if c.State == runtime.StateUnknown {
				c.State = stateFromFlags(r.State)
			}
			c.Started = r.State.StartedAt.Time
			c.Finished = r.State.FinishedAt.Time
		}
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// ParseVersion parses `version --format '{{json .}}'`, the same shape on
// docker and podman: Client.Version, and Server.Version when an engine
// answered (Server is "" otherwise).
//
// Platform is the server's: docker's Server.Os and Server.Arch, podman's
// Server.OsArch (remote) or, with no server, the client's OsArch (local
// podman is its own engine).
func ParseVersion(out []byte) (runtime.Version, error) {
	type side struct{ Version, Os, Arch, OsArch string }
	var r struct {
		Client *side `json:"Client"`
		Server *side `json:"Server"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return runtime.Version{}, fmt.Errorf("version output is not a JSON object: %w", err)
	}
	if r.Client == nil || r.Client.Version == "" {
		return runtime.Version{}, errors.New("version output has no Client.Version")
	}
	platform := func(s *side) string {
		switch {
		case s.OsArch != "":
			return s.OsArch
		case s.Os != "" && s.Arch != "":
			return s.Os + "/" + s.Arch
		}
		return ""
	}
	v := runtime.Version{Client: r.Client.Version}
	if r.Server != nil {
		v.Server, v.Platform = r.Server.Version, platform(r.Server)
	}
	return v, nil
}

// ClientPlatform is the "os/arch" a version output gives for the client
// (local podman: where its sandboxes run).
func ClientPlatform(out []byte) string {
	var r struct {
		Client *struct{ OsArch string } `json:"Client"`
	}
	if json.Unmarshal(bytes.TrimSpace(out), &r) != nil || r.Client == nil {
		return ""
	}
	return r.Client.OsArch
}

// rawImage holds the fields hsbx reads from `image inspect` (same keys on
// docker and podman; Entrypoint is null, a string or an array).
type rawImage struct {
	ID      string   `json:"Id"`
	Created FlexTime `json:"Created"`
	Size    int64    `json:"Size"`
	Config  *struct {
		Entrypoint json.RawMessage   `json:"Entrypoint"`
		Labels     map[string]string `json:"Labels"`
		Env        []string          `json:"Env"`
	} `json:"Config"`
}

// ParseImageInspect parses `image inspect` output for one image.
func ParseImageInspect(out []byte) (runtime.Image, error) {
	imgs, err := ParseImagesInspect(out)
	if err != nil {
		return runtime.Image{}, err
	}
	if len(imgs) != 1 {
		return runtime.Image{}, fmt.Errorf("image inspect printed %d images, want 1", len(imgs))
	}
	return imgs[0], nil
}

// ParseImagesInspect parses `image inspect` output for any number of
// images. An image's id is the same on both engines ("sha256:" and 64 hex
// digits: podman prints the digits alone).
func ParseImagesInspect(out []byte) ([]runtime.Image, error) {
	var raws []rawImage
	if err := json.Unmarshal(bytes.TrimSpace(out), &raws); err != nil {
		return nil, fmt.Errorf("image inspect output is not a JSON array of images: %w", err)
	}
	imgs := make([]runtime.Image, 0, len(raws))
	for i, r := range raws {
		if r.ID == "" {
			return nil, fmt.Errorf("image inspect entry %d has no Id", i)
		}
		img := runtime.Image{ID: ImageID(r.ID), Size: r.Size, Created: r.Created.Time}
		if r.Config != nil {
			img.Labels, img.EnvNames = r.Config.Labels, envNames(r.Config.Env)
			if len(r.Config.Entrypoint) > 0 {
				var one string
				if json.Unmarshal(r.Config.Entrypoint, &one) == nil {
					if one != "" {
						img.Entrypoint = []string{one}
					}
				} else if err := json.Unmarshal(r.Config.Entrypoint, &img.Entrypoint); err != nil {
					return nil, fmt.Errorf("image Config.Entrypoint is neither a string nor an array of strings")
				}
			}
		}
		if img.Labels == nil {
			img.Labels = map[string]string{}
		}
		imgs = append(imgs, img)
	}
	return imgs, nil
}

// ImageID is an image id as docker prints it: "sha256:" and the digits
// (podman prints the digits alone in some places).
func ImageID(id string) string {
	id = strings.TrimSpace(id)
	if id != "" && !strings.Contains(id, ":") {
		return "sha256:" + id
	}
	return id
}

// envNames are the names of NAME=VALUE entries; the values are dropped.
func envNames(env []string) []string {
	var names []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != "" {
			names = append(names, k)
		}
	}
	return names
}

func stateFromFlags(s *rawState) runtime.State {
	switch {
	case s.Dead:
		return runtime.StateDead
	case s.Paused:
		return runtime.StatePaused
	case s.Restarting:
		return runtime.StateRestarting
	case s.Running:
		return runtime.StateRunning
	}
	return runtime.StateUnknown
}

// NormalizeState maps an engine's state word to a runtime.State.
func NormalizeState(s string) runtime.State {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "created", "configured", "initialized":
		return runtime.StateCreated
	case "running", "up":
		return runtime.StateRunning
	case "paused":
		return runtime.StatePaused
	case "restarting":
		return runtime.StateRestarting
	case "removing":
		return runtime.StateRemoving
	case "stopping":
		return runtime.StateStopping
	case "exited", "stopped":
		return runtime.StateExited
	case "dead":
		return runtime.StateDead
	}
	return runtime.StateUnknown
}

// FlexTime decodes a JSON timestamp that is a string in any format
// runtime.ParseTime knows or a number of unix seconds. An unparseable value
// decodes to the zero time (age unknown), never to an error, so one odd
// field does not hide a whole listing.
type FlexTime struct {
	time.Time
}

// UnmarshalJSON implements json.Unmarshaler.
func (f *FlexTime) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return nil
	}
	var err error
	if b[0] == '"' {
		var s string
		if err = json.Unmarshal(b, &s); err != nil {
			return err
		}
		f.Time, err = runtime.ParseTime(s)
	} else {
		var n float64
		if n, err = strconv.ParseFloat(string(b), 64); err == nil {
			f.Time, err = runtime.UnixTime(n)
		}
	}
	if err != nil {
		f.Time = time.Time{}
	}
	return nil
}
