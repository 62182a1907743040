package agentapi

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrNotAMode is Parse's error for arguments that name no mode: the
// binary holding the agent is then free to be something else.
var ErrNotAMode = errors.New("not an agent mode")

// ArgsError is Parse's error for a mode given arguments it does not take.
type ArgsError struct {
	Mode string
	Args []string
	Why  string
}

func (e *ArgsError) Error() string {
	return fmt.Sprintf("%s: bad arguments %q: %s", e.Mode, e.Args, e.Why)
}

// Parse reads the agent binary's arguments (os.Args[1:]) as the Call
// whose Args they are: Parse(c.Args()) is c for every Call c.
func Parse(args []string) (Call, error) {
	if len(args) == 0 {
		return nil, ErrNotAMode
	}
	p := parser{mode: args[0], rest: args[1:]}
	c := p.call()
	if c == nil {
		return nil, fmt.Errorf("%q: %w", args[0], ErrNotAMode)
	}
	if p.why != "" {
		return nil, &ArgsError{Mode: p.mode, Args: p.rest, Why: p.why}
	}
	return c, nil
}

// parser reads one mode's arguments; the first fault is why.
type parser struct {
	mode string
	rest []string
	why  string
}

func (p *parser) bad(format string, a ...any) {
	if p.why == "" {
		p.why = fmt.Sprintf(format, a...)
	}
}

// count wants exactly n arguments, or at least n when more is true.
func (p *parser) count(n int, more bool) bool {
	if len(p.rest) == n || more && len(p.rest) >= n {
		return true
	}
	if more {
		p.bad("want at least %d", n)
	} else {
		p.bad("want %d", n)
	}
	return false
}

func (p *parser) size(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		p.bad("bad size %q", s)
	}
	return n
}

func (p *parser) flag(s string) bool {
	if s != "0" && s != "1" {
		p.bad("bad flag %q: want 0 or 1", s)
	}
	return s == "1"
}

func (p *parser) call() Call {
	r := p.rest
	switch p.mode {
	case ModeAgent:
		p.count(0, false)
		return Agent{}
	case ModeFeatures:
		p.count(0, false)
		return Features{}
	case ModeBgList:
		p.count(0, false)
		return BgList{}
	case ModeSnapshotRestore:
		p.count(0, false)
		return SnapshotRestore{}
	case ModeInstallAs:
		if !p.count(2, true) {
			return InstallAs{}
		}
		then, err := Parse(r[1:])
		if err != nil {
			p.bad("then: %v", err)
		}
		return InstallAs{Name: r[0], Then: then}
	}
	if p.one() {
		p.count(1, false)
		if len(r) == 0 {
			return p.single("")
		}
		return p.single(r[0])
	}
	return p.several(r)
}

// one says whether the mode takes exactly one argument.
func (p *parser) one() bool {
	switch p.mode {
	case ModeKillMarked, ModeTarOut, ModeTarIn, ModeCopyIn, ModeSessionServer, ModeTrust, ModeForward,
		ModeFileList, ModeBgInfo, ModeBgWait:
		return true
	}
	return false
}

func (p *parser) single(a string) Call {
	switch p.mode {
	case ModeKillMarked:
		return KillMarked{Marker: a}
	case ModeTarOut:
		return TarOut{Src: a}
	case ModeTarIn:
		return TarIn{Dst: a}
	case ModeCopyIn:
		return CopyIn{Dst: a}
	case ModeSessionServer:
		return SessionServer{Base: a}
	case ModeTrust:
		return Trust{Dir: a}
	case ModeForward:
		return Forward{Addr: a}
	case ModeFileList:
		return FileList{Path: a}
	case ModeBgInfo:
		return BgInfo{ID: a}
	case ModeBgWait:
		return BgWait{ID: a}
	}
	return nil
}

// several reads the modes of more than one argument.
func (p *parser) several(r []string) Call {
	arg := func(i int) string { // "" past the end (count said why)
		if i < len(r) {
			return r[i]
		}
		return ""
	}
	switch p.mode {
	case ModeCopyOut:
		p.count(2, false)
		return CopyOut{Src: arg(0), Bound: p.size(arg(1))}
	case ModeFileRead:
		p.count(2, false)
		return FileRead{Path: arg(0), Max: p.size(arg(1))}
	case ModeFileWrite:
		p.count(3, false)
		mode := int64(KeepMode)
		if m := arg(1); m != "-" {
			n, err := strconv.ParseInt(m, 8, 64)
			if err != nil || n < 0 || n > 0o7777 {
				p.bad("bad mode %q", m)
			}
			mode = n
		}
		return FileWrite{Path: arg(0), Mode: mode, Max: p.size(arg(2))}
	case ModeFileRemove:
		p.count(2, false)
		return FileRemove{Path: arg(0), Recursive: p.flag(arg(1))}
	case ModeFileWatch:
		p.count(2, false)
		return FileWatch{Path: arg(0), Recursive: p.flag(arg(1))}
	case ModeUnreachable:
		p.count(2, true)
		wait, err := time.ParseDuration(arg(0))
		if err != nil {
			p.bad("bad wait %q", arg(0))
		}
		return Unreachable{Wait: wait, Addrs: tail(r, 1)}
	case ModeBgStart:
		p.count(3, true)
		return BgStart{ID: arg(0), Bound: p.size(arg(1)), Command: tail(r, 2)}
	case ModeBgSupervise:
		p.count(2, true)
		return BgSupervise{ID: arg(0), Command: tail(r, 1)}
	case ModeBgOutput:
		p.count(3, false)
		return BgOutput{ID: arg(0), From: p.size(arg(1)), Follow: p.flag(arg(2))}
	case ModeBgKill:
		p.count(2, false)
		sig, err := strconv.Atoi(arg(1))
		if err != nil || sig <= 0 || sig > 64 {
			p.bad("bad signal %q", arg(1))
		}
		return BgKill{ID: arg(0), Signal: sig}
	case ModeSnapshotHold:
		p.count(1, true)
		return SnapshotHold{Bound: p.size(arg(0)), Paths: tail(r, 1)}
	}
	return nil
}

func tail(r []string, i int) []string {
	if i >= len(r) {
		return nil
	}
	return r[i:]
}
