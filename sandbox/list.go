package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

// Listing is one sandbox as `hsbx ls` shows it.
type Listing struct {
	ID       string        `json:"id"`
	Name     string        `json:"name"`
	Profile  string        `json:"profile"`
	Task     string        `json:"task"`
	State    runtime.State `json:"state"`
	Image    string        `json:"image"`
	Created  time.Time     `json:"created"`
	Finished *time.Time    `json:"finished"` // nil unless it has exited
	// Channel is the exec channel's state for a running sandbox: "up",
	// "down", "off" or "unavailable: <why>" (see Sandbox.ChannelStatus).
	Channel string `json:"channel,omitempty"`
	// Drift names the settings it was made from that differ from the
	// spec List was given (see Manager.List): a stale sandbox.
	Drift []string `json:"drift,omitempty"`
}

// List returns the sandboxes of the scope (of every profile when all is
// set), including those the Hermes backend made, newest first. With a
// spec, the scope's sandboxes made from other settings say which (Drift).
// Two engine calls: a filtered ps, then one inspect of all matches for
// exact labels and times.
func (m *Manager) List(ctx context.Context, scope Scope, all bool, spec *Spec) ([]Listing, error) {
	filters := []string{LabelAgent + "=1"}
	if !all {
		filters = append(filters, LabelProfile+"="+scope.HermesProfile())
	}
	cs, err := m.c.Runtime.List(ctx, runtime.ListOptions{Labels: filters})
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	if len(cs) == 0 {
		return nil, nil
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	full, err := m.c.Runtime.Inspect(ctx, ids...)
	if err != nil && !errors.Is(err, runtime.ErrNotFound) { // one removed meanwhile is fine
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	var out []Listing
	for _, c := range full {
		if c.Labels[LabelAgent] != "1" {
			continue
		}
		if !all && !scope.Contains(c.Labels) {
			continue // another profile that sanitizes alike
		}
		l := Listing{ID: c.ID, Name: c.Name, State: c.State, Image: c.Image, Created: c.Created}
		l.Profile, l.Task = Owner(c.Labels)
		if !c.State.Alive() && !c.Finished.IsZero() {
			f := c.Finished
			l.Finished = &f
		}
		if spec != nil && scope.Contains(c.Labels) {
			l.Drift = m.drift(c, *spec)
		}
		if c.State == runtime.StateRunning {
			l.Channel = m.holderStatus(c.ID, "", fmt.Sprintf("%d:%d", m.c.UID, m.c.GID))
		}
		out = append(out, l)
	}
	slices.SortStableFunc(out, func(a, b Listing) int { return b.Created.Compare(a.Created) })
	return out, nil
}
