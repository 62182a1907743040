package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/hsbx/hsbx/internal/agentapi"
	"github.com/hsbx/hsbx/internal/channel"
	"github.com/hsbx/hsbx/internal/proc"
)

// A snapshot's hold: the sandbox's processes stopped and its mounted paths
// staged into its layer by the agent, for the engine's commit; and a
// sandbox made from a snapshot.

// holdRun is a running snapshot-hold: the sandbox's processes stopped,
// its paths staged, until release.
type holdRun struct {
	rep     agentapi.SnapshotReport
	in      *io.PipeWriter
	once    sync.Once
	done    chan struct{}
	code    int
	err     error
	stderr  *proc.TailBuffer
	lines   *bufio.Scanner
	outPipe *io.PipeReader
}

// hold starts snapshot-hold in sandbox id and waits for its report.
func (s *Sandbox) hold(ctx context.Context, id string, bound int64) (*holdRun, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := &holdRun{in: inW, done: make(chan struct{}), stderr: &proc.TailBuffer{Max: 4 << 10}, outPipe: outR}
	a := s.agent(ctx, id, "0")
	args := agentapi.SnapshotHold{Bound: bound, Paths: s.snapshotPaths()}.Args()
	release := s.markInUse()
	go func() {
		defer close(h.done)
		defer release()
		h.code, h.err = channel.RunAgent(ctx, a, channel.AgentExec{Args: args, Stdin: inR, Stdout: outW, Stderr: h.stderr})
		_ = outW.Close()
		_ = inR.Close()
	}()
	h.lines = bufio.NewScanner(outR)
	h.lines.Buffer(make([]byte, 64<<10), 1<<20)
	if !h.lines.Scan() {
		h.release()
		_ = h.wait()
		if h.err != nil {
			return nil, h.err
		}
		return nil, fmt.Errorf("hsbx's agent said nothing of the snapshot (exit %d): %s", h.code, strings.TrimSpace(string(h.stderr.Bytes())))
	}
	if err := json.Unmarshal(h.lines.Bytes(), &h.rep); err != nil {
		h.release()
		_ = h.wait()
		return nil, fmt.Errorf("hsbx's agent's snapshot report: %w", err)
	}
	if h.rep.Error != "" {
		h.release()
		_ = h.wait()
		return nil, stageError(h.rep)
	}
	return h, nil
}

func stageError(rep agentapi.SnapshotReport) error {
	switch rep.Kind {
	case agentapi.SnapshotKindTooLarge:
		return fmt.Errorf("%w: %s (snapshot_max_size); nothing was kept", ErrSnapshotTooLarge, rep.Error)
	case agentapi.SnapshotKindNoSpace:
		return fmt.Errorf("%w: %s; nothing was kept", ErrNoSpace, rep.Error)
	case agentapi.SnapshotKindBusy:
		return fmt.Errorf("%w: %s; try again when it is done", ErrBusy, rep.Error)
	}
	return fmt.Errorf("hsbx's agent could not copy the sandbox's files: %s", rep.Error)
}

// release tells the hold to end (remove the stage, continue the
// processes); more than once is once.
func (h *holdRun) release() {
	h.once.Do(func() {
		_, _ = h.in.Write([]byte("go\n"))
		_ = h.in.Close()
	})
}

// wait waits for the hold to end and reads its last report.
func (h *holdRun) wait() error {
	go func() { // drain, so the agent never blocks on its last line
		for h.lines.Scan() {
			var r agentapi.SnapshotReport
			if json.Unmarshal(h.lines.Bytes(), &r) == nil && r.Thawed > 0 {
				h.rep.Thawed = r.Thawed
			}
		}
	}()
	<-h.done
	_ = h.outPipe.Close()
	if h.err != nil {
		return h.err
	}
	if h.code != 0 {
		return fmt.Errorf("snapshot-hold exited %d: %s", h.code, strings.TrimSpace(string(h.stderr.Bytes())))
	}
	return nil
}

// hostDirsEmpty refuses a fork into a key whose persistent directories
// hold files (a task taken down without --purge): they are not replaced.
func (s *Sandbox) hostDirsEmpty() error {
	if !s.spec.Persistent || !s.rt().Capabilities().HostDirs {
		return nil
	}
	for _, d := range s.Storage().HostDirs() {
		ents, err := os.ReadDir(d)
		if err == nil && len(ents) > 0 {
			return fmt.Errorf("%w: task %q keeps files in %s; fork into a new task, or remove them (hsbx down --purge --task %s)", ErrSandboxExists, s.key.Task, d, s.key.Task)
		}
	}
	return nil
}

// createFrom creates the key's sandbox from snapshot si and puts its
// staged paths back; a sandbox that cannot be restored is removed.
func (s *Sandbox) createFrom(ctx context.Context, si SnapshotInfo) (Result, error) {
	s.mu.Lock()
	s.fromImage = si.ID
	s.mu.Unlock()
	res, err := s.Ensure(ctx)
	s.mu.Lock()
	s.fromImage = ""
	s.mu.Unlock()
	if err != nil {
		return Result{}, err
	}
	if res.Action != Created {
		return Result{}, fmt.Errorf("%w: another process made task %q's sandbox %s meanwhile", ErrSandboxExists, s.key.Task, res.Name)
	}
	var out strings.Builder
	errb := &proc.TailBuffer{Max: 4 << 10}
	a := s.agent(ctx, res.ID, "0")
	code, err := channel.RunAgent(ctx, a, channel.AgentExec{Args: agentapi.SnapshotRestore{}.Args(), Stdout: &out, Stderr: errb})
	var rep agentapi.SnapshotReport
	if err == nil {
		line, _, _ := strings.Cut(out.String(), "\n")
		if jerr := json.Unmarshal([]byte(line), &rep); jerr != nil {
			err = fmt.Errorf("hsbx's agent's restore report (exit %d): %v: %s", code, jerr, strings.TrimSpace(string(errb.Bytes())))
		} else if rep.Error != "" {
			err = stageError(rep)
		}
	}
	if err != nil {
		cctx := context.WithoutCancel(ctx)
		s.forget(res.ID)
		if rerr := s.rt().Remove(cctx, true, res.ID); rerr != nil {
			s.m.c.Warn(fmt.Sprintf("sandbox %s, made from snapshot %s, could not be restored and could not be removed: %v", res.Name, si.Name, rerr))
		}
		return Result{}, fmt.Errorf("restoring snapshot %s into sandbox %s (removed): %w", si.Name, res.Name, err)
	}
	return res, nil
}
