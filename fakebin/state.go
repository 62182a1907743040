package fakebin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hsbx/hsbx/internal/filelock"
)

// Container is one fake container as kept in the state file.
type Container struct {
	ID         string            `json:"id"`
	Name       string            `json:"name"`
	Image      string            `json:"image"`
	Labels     map[string]string `json:"labels"`
	State      string            `json:"state"` // created running paused exited dead
	Created    time.Time         `json:"created"`
	StartedAt  time.Time         `json:"started_at"`
	FinishedAt time.Time         `json:"finished_at"`
	ExitCode   int               `json:"exit_code"`
	Cmd        []string          `json:"cmd"`
	Env        []string          `json:"env"`
	WorkDir    string            `json:"workdir"`
	User       string            `json:"user"`
	Init       bool              `json:"init"`
	RunArgs    []string          `json:"run_args"`
	// Namespace, Annotations and RV (resourceVersion) are a Pod's, made
	// by the fake kubectl ("" namespace: a docker/podman container).
	Namespace string `json:"namespace,omitempty"`
	// RuntimeClass is a Pod's runtimeClassName.
	RuntimeClass string            `json:"runtime_class,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	RV           int               `json:"rv,omitempty"`
	// Claims are the PersistentVolumeClaims a Pod mounts; Unschedulable
	// is why the scheduler holds it (a claim missing).
	Claims        []string `json:"claims,omitempty"`
	Unschedulable string   `json:"unschedulable,omitempty"`
	// Execs are the exec'd command processes, by host pid. They outlive a
	// killed client, as on a real engine.
	Execs map[string]ExecProc `json:"execs,omitempty"`
}

// ExecProc is one command started by exec (one exec session).
type ExecProc struct {
	ID    string   `json:"id"` // the session id inspect lists
	Pid   int      `json:"pid"`
	Cmd   []string `json:"cmd"`
	Token string   `json:"token"` // its HSBX_EXEC_ID, if any
	// Stale: podman keeps the session of an exec that failed to start
	// (measured on 4.3); it is listed but runs nothing.
	Stale bool `json:"stale,omitempty"`
}

// State is the whole fake engine.
type State struct {
	Seq        int          `json:"seq"`
	Containers []*Container `json:"containers"`
	// Pulled are the images pull fetched from FAKEENGINE_REGISTRY.
	Pulled []string `json:"pulled,omitempty"`
	// Images are the images commit made.
	Images []*Image `json:"images,omitempty"`
	// Claims are the fake kubectl's PersistentVolumeClaims.
	Claims []*Claim `json:"claims,omitempty"`
	// Volumes are docker's and podman's named volumes.
	Volumes []*Volume `json:"volumes,omitempty"`
	// NetworkPolicies are the fake kubectl's (kept while their owner
	// Pod is: the garbage collector's work, done at once).
	NetworkPolicies []*NetworkPolicy `json:"network_policies,omitempty"`
	// Storage are podman's storage-only containers (name -> id): what a
	// `run` killed between creating the storage and registering the
	// container leaves. No ps or inspect shows them; they hold the name.
	Storage map[string]string `json:"storage,omitempty"`
}

// NetworkPolicy is one fake NetworkPolicy, owned by a Pod.
type NetworkPolicy struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	UID       string            `json:"uid"`
	OwnerUID  string            `json:"owner_uid"`
	Labels    map[string]string `json:"labels,omitempty"`
	Raw       json.RawMessage   `json:"raw"`
}

// Claim is one fake PersistentVolumeClaim.
type Claim struct {
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	UID         string            `json:"uid"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Class       string            `json:"class"`
	Size        string            `json:"size"`
	Created     time.Time         `json:"created"`
	// Deleting: deleted while a Pod used it; it goes with the last Pod
	// (the pvc-protection finalizer).
	Deleting time.Time `json:"deleting,omitzero"`
}

// store is the state file plus its lock, under dir.
type store struct {
	dir string
}

func (s store) path(name string) string { return filepath.Join(s.dir, name) }

// lock takes the state lock (exclusive or shared) and returns its release.
func (s store) lock(exclusive bool) (func(), error) {
	if exclusive {
		return filelock.Exclusive(s.path("state.lock"))
	}
	return filelock.Shared(s.path("state.lock"))
}

// update locks the state, lets fn change it and writes it back (not when
// fn fails).
func (s store) update(fn func(*State) error) error {
	return s.with(true, func(st *State) error {
		if err := fn(st); err != nil {
			return err
		}
		b, err := json.MarshalIndent(st, "", " ")
		if err != nil {
			return err
		}
		tmp := s.path("state.json.tmp")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, s.path("state.json"))
	})
}

// view reads the state under a shared lock.
func (s store) view(fn func(*State) error) error { return s.with(false, fn) }

// with runs fn on the state read under the lock.
func (s store) with(exclusive bool, fn func(*State) error) error {
	unlock, err := s.lock(exclusive)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := s.read()
	if err != nil {
		return err
	}
	return fn(st)
}

func (s store) read() (*State, error) {
	b, err := os.ReadFile(s.path("state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return &State{}, nil
	}
	if err != nil {
		return nil, err
	}
	st := &State{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("fake engine state %s is corrupt: %w", s.path("state.json"), err)
	}
	return st, nil
}

// find resolves a name, full ID or unique ID prefix.
func (st *State) find(ref string) *Container {
	for _, c := range st.Containers {
		if c.Name == ref || c.ID == ref {
			return c
		}
	}
	var hit *Container
	if len(ref) >= 3 {
		for _, c := range st.Containers {
			if strings.HasPrefix(c.ID, ref) {
				if hit != nil {
					return nil
				}
				hit = c
			}
		}
	}
	return hit
}

func (st *State) remove(c *Container) {
	out := st.Containers[:0]
	for _, x := range st.Containers {
		if x != c {
			out = append(out, x)
		}
	}
	st.Containers = out
}

func (st *State) newID(name string, now time.Time) string {
	st.Seq++
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d/%s/%d", st.Seq, name, now.UnixNano())))
	return hex.EncodeToString(sum[:])
}

// newest first, as both engines list.
func (st *State) sorted() []*Container {
	cs := append([]*Container(nil), st.Containers...)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Created.After(cs[j].Created) })
	return cs
}

var adjectives = []string{"brave", "calm", "eager", "fancy", "gentle", "happy", "jolly", "kind"}
var nouns = []string{"turing", "hopper", "lovelace", "knuth", "ritchie", "thompson", "pike", "cox"}

func randomName(seq int) string {
	return adjectives[seq%len(adjectives)] + "_" + nouns[(seq/len(adjectives))%len(nouns)] + fmt.Sprint(seq)
}
