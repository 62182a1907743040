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
	ID     string `json:"Id"`
	Config *struct {
		Entrypoint json.RawMessage `json:"Entrypoint"`
	} `json:"Config"`
}

// ParseImageInspect parses `image inspect` output for one image.
func ParseImageInspect(out []byte) (runtime.Image, error) {
	var raws []rawImage
	if err := json.Unmarshal(bytes.TrimSpace(out), &raws); err != nil {
		return runtime.Image{}, fmt.Errorf("image inspect output is not a JSON array of images: %w", err)
	}
	if len(raws) != 1 || raws[0].ID == "" {
		return runtime.Image{}, fmt.Errorf("image inspect printed %d images, want 1 with an Id", len(raws))
	}
	img := runtime.Image{ID: raws[0].ID}
	if raws[0].Config != nil && len(raws[0].Config.Entrypoint) > 0 {
		var one string
		if json.Unmarshal(raws[0].Config.Entrypoint, &one) == nil {
			if one != "" {
				img.Entrypoint = []string{one}
			}
		} else if err := json.Unmarshal(raws[0].Config.Entrypoint, &img.Entrypoint); err != nil {
			return runtime.Image{}, fmt.Errorf("image Config.Entrypoint is neither a string nor an array of strings")
		}
	}
	return img, nil
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
