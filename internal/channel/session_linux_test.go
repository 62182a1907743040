package channel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hsbx/hsbx/internal/wire"
)

// Sessions through an in-process agent, whose keepers are this test
// binary (TestMain), in each shell hsbx may find: bash, and busybox's sh
// (what Alpine and the busybox images have).

type shellCase struct{ name, path string }

func sessionShells(t *testing.T) []shellCase {
	t.Helper()
	cases := []shellCase{}
	if p, err := exec.LookPath("bash"); err == nil {
		cases = append(cases, shellCase{"bash", filepath.Dir(p) + ":" + os.Getenv("PATH")})
	}
	if bb, err := exec.LookPath("busybox"); err == nil {
		dir := t.TempDir()
		for _, applet := range []string{"sh", "sleep", "cat", "head", "printf", "dd", "kill", "tr", "wc", "echo", "pwd", "true", "false", "ls"} {
			if err := os.Symlink(bb, filepath.Join(dir, applet)); err != nil {
				t.Fatal(err)
			}
		}
		cases = append(cases, shellCase{"busybox-sh", dir})
	}
	if len(cases) == 0 {
		t.Skip("neither bash nor busybox here")
	}
	return cases
}

// sessionEnv points the agent's sessions at a directory of the test's
// and PATH at the shell under test.
func sessionEnv(t *testing.T, sc shellCase) {
	t.Setenv(SessionsDirVarForTest, t.TempDir())
	t.Setenv("PATH", sc.path)
}

// SessionsDirVarForTest is agent.SessionsDirVar (not imported twice).
const SessionsDirVarForTest = "HSBX_SESSIONS_DIR"

type sres struct {
	Result
	out, err string
	runErr   error
}

func srun(t *testing.T, c *Conn, session, script string, mod func(*Request)) sres {
	t.Helper()
	return srunCtx(context.Background(), t, c, session, script, mod)
}

func srunCtx(ctx context.Context, t *testing.T, c *Conn, session, script string, mod func(*Request)) sres {
	t.Helper()
	var out, errb bytes.Buffer
	req := Request{Start: wire.Start{Session: session, Script: script, Marker: "HSBX_EXEC_ID=" + strconv.FormatInt(time.Now().UnixNano(), 36)}, Stdout: &out, Stderr: &errb}
	if mod != nil {
		mod(&req)
	}
	res, err := c.Run(ctx, req)
	return sres{res, out.String(), errb.String(), err}
}

func closeSession(t *testing.T, c *Conn, name string) {
	t.Helper()
	r := srun(t, c, name, "", func(r *Request) { r.Start.Op = wire.SessionOpClose })
	if r.runErr != nil || r.Code != 0 {
		t.Errorf("close %s: %v %d %q", name, r.runErr, r.Code, r.err)
	}
}

func TestSessionKeepsShellState(t *testing.T) {
	for _, sc := range sessionShells(t) {
		t.Run(sc.name, func(t *testing.T) {
			sessionEnv(t, sc)
			c := pair(t)
			dir := t.TempDir()
			first := srun(t, c, "s1", "cd "+dir+"; export GREETING='hi there'; f() { echo \"fn $1\"; }; false", nil)
			if first.runErr != nil || first.Code != 1 || first.Session == nil || !first.Session.New || first.Session.Reset != "" {
				t.Fatalf("first run: %+v %q", first, first.err)
			}
			r := srun(t, c, "s1", `echo "$?"; pwd; echo "$GREETING"; f x`, nil)
			if r.runErr != nil || r.Code != 0 || r.out != "1\n"+dir+"\nhi there\nfn x\n" || r.err != "" {
				t.Fatalf("second run: %+v out %q err %q", r.Result, r.out, r.err)
			}
			if r.Session.New || r.Session.ID != first.Session.ID {
				t.Fatalf("second run made a new shell: %+v vs %+v", r.Session, first.Session)
			}
			// Another session is another shell.
			o := srun(t, c, "other", `pwd; echo "[$GREETING]"`, nil)
			if o.out == r.out || !strings.Contains(o.out, "[]") || o.Session.ID == first.Session.ID {
				t.Fatalf("another session shares state: %q %+v", o.out, o.Session)
			}
			closeSession(t, c, "s1")
			closeSession(t, c, "other")
		})
	}
}

func TestSessionOutputIsByteExact(t *testing.T) {
	for _, sc := range sessionShells(t) {
		t.Run(sc.name, func(t *testing.T) {
			sessionEnv(t, sc)
			c := pair(t)
			// No newline added or eaten; NUL bytes; separate streams; what
			// the protocol's lines look like, printed by the script.
			r := srun(t, c, "b", `printf 'a\000b'; printf 'err no newline' >&2; printf '\nS 0 x\nO y\nY z\n'; printf 'S 0 x\n' >&2`, nil)
			if r.runErr != nil || r.Code != 0 || r.out != "a\x00b\nS 0 x\nO y\nY z\n" || r.err != "err no newline"+"S 0 x\n" {
				t.Fatalf("got %+v out %q err %q", r.Result, r.out, r.err)
			}
			// 10 MB without a newline.
			big := srun(t, c, "b", `head -c 10485760 /dev/zero | tr '\000' x; echo; exit_status_stays=1`, nil)
			if big.runErr != nil || big.Code != 0 || len(big.out) != 10<<20+1 || strings.Trim(big.out, "x\n") != "" {
				t.Fatalf("10 MB: %v %d len %d err %q", big.runErr, big.Code, len(big.out), big.err)
			}
			// The script closes its own output: the shell keeps its own.
			cl := srun(t, c, "b", `exec 1>&- 2>&-; true`, nil)
			if cl.runErr != nil || cl.Code != 0 {
				t.Fatalf("closing stdout: %+v %v", cl.Result, cl.runErr)
			}
			after := srun(t, c, "b", `echo still; echo here >&2; exit_status_stays=1`, nil)
			if after.out != "still\n" || after.err != "here\n" || after.Session.New {
				t.Fatalf("after closing its output: %+v out %q err %q", after.Result, after.out, after.err)
			}
			// A syntax error is the script's status 2; the session lives.
			se := srun(t, c, "b", `echo "unterminated`, nil)
			if se.Code != 2 || se.Session.Ended != "" || se.err == "" {
				t.Fatalf("syntax error: %+v err %q", se.Result, se.err)
			}
			if r := srun(t, c, "b", `echo ok`, nil); r.out != "ok\n" || r.Session.New {
				t.Fatalf("after a syntax error: %+v %q", r.Result, r.out)
			}
			closeSession(t, c, "b")
		})
	}
}

func TestSessionStdin(t *testing.T) {
	for _, sc := range sessionShells(t) {
		t.Run(sc.name, func(t *testing.T) {
			sessionEnv(t, sc)
			c := pair(t)
			// Without input, a reader gets EOF at once, never the next script.
			r := srun(t, c, "in", `cat; echo "read: $?"`, nil)
			if r.out != "read: 0\n" {
				t.Fatalf("no stdin: %q %q", r.out, r.err)
			}
			r = srun(t, c, "in", `cat | wc -c`, func(q *Request) { q.Stdin = strings.NewReader(strings.Repeat("z", 3<<20)) })
			if strings.TrimSpace(r.out) != strconv.Itoa(3<<20) || r.Code != 0 {
				t.Fatalf("3 MiB stdin: %+v %q %q", r.Result, r.out, r.err)
			}
			r = srun(t, c, "in", `read line; echo "got $line"`, func(q *Request) { q.Stdin = strings.NewReader("one\ntwo\n") })
			if r.out != "got one\n" {
				t.Fatalf("read: %q %q", r.out, r.err)
			}
			// What the script left unread is gone with it.
			if r := srun(t, c, "in", `cat; echo end`, nil); r.out != "end\n" {
				t.Fatalf("leftover input reached the next script: %q", r.out)
			}
			closeSession(t, c, "in")
		})
	}
}

func TestSessionInterruptKeepsTheSession(t *testing.T) {
	for _, sc := range sessionShells(t) {
		t.Run(sc.name, func(t *testing.T) {
			sessionEnv(t, sc)
			c := pair(t)
			dir := t.TempDir()
			srun(t, c, "i", "cd "+dir+"; X=kept", nil)
			for _, script := range []string{"sleep 100; echo after", "while :; do :; done; echo after", "echo started; sleep 100 & wait; echo after"} {
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				start := time.Now()
				r := srunCtx(ctx, t, c, "i", script, nil)
				cancel()
				if sc.name == "busybox-sh" && strings.HasPrefix(script, "while") && r.Session != nil && r.Session.Ended != "" {
					// busybox's sh now and then does not leave a loop of
					// its own on SIGINT: the session then ends, and says so.
					t.Logf("%q: the session ended: %s", script, r.Session.Ended)
					if after := srun(t, c, "i", "cd "+dir+"; X=kept", nil); !after.Session.New || after.Session.Reset == "" {
						t.Fatalf("after the end: %+v", after.Session)
					}
					continue
				}
				if r.runErr != nil || !r.Interrupted || strings.Contains(r.out, "after") || r.Session == nil || r.Session.Ended != "" {
					t.Fatalf("%q: %+v %v out %q err %q", script, r.Result, r.runErr, r.out, r.err)
				}
				if d := time.Since(start); d > KillWait {
					t.Fatalf("%q: the interrupt took %s", script, d)
				}
				after := srun(t, c, "i", `pwd; echo "$X"`, nil)
				if after.out != dir+"\nkept\n" || after.Session.New {
					t.Fatalf("after interrupting %q: %+v %+v out %q err %q", script, after.Result, after.Session, after.out, after.err)
				}
			}
			closeSession(t, c, "i")
		})
	}
}

func TestSessionBackgroundJobs(t *testing.T) {
	for _, sc := range sessionShells(t) {
		t.Run(sc.name, func(t *testing.T) {
			sessionEnv(t, sc)
			c := pair(t)
			// Returns when its foreground part ends; the job lives on, and
			// its output (after the script) does not kill it.
			start := time.Now()
			// The job's pid goes in a directory of the test's (the shell's
			// cwd is the package's source directory).
			pid := filepath.Join(t.TempDir(), "pid")
			r := srun(t, c, "bg", `(sleep 1; while :; do echo tick; sleep 0.2; done) & echo $! > '`+pid+`'; echo started`, func(q *Request) {})
			if r.runErr != nil || r.Code != 0 || r.out != "started\n" {
				t.Fatalf("%+v %v %q %q", r.Result, r.runErr, r.out, r.err)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("the script waited for its background job: %s", d)
			}
			time.Sleep(2 * time.Second)
			alive := srun(t, c, "bg", `kill -0 "$(cat '`+pid+`')" && echo alive`, nil)
			if alive.out != "alive\n" || strings.Contains(alive.out, "tick") {
				t.Fatalf("the background job: %q %q", alive.out, alive.err)
			}
			// An interrupt of a later script leaves it alone.
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			srunCtx(ctx, t, c, "bg", "sleep 30", nil)
			cancel()
			alive = srun(t, c, "bg", `kill -0 "$(cat '`+pid+`')" && echo alive; kill "$(cat '`+pid+`')"`, nil)
			if alive.out != "alive\n" {
				t.Fatalf("the background job after an interrupt: %q %q", alive.out, alive.err)
			}
			closeSession(t, c, "bg")
		})
	}
}

func TestSessionEndsWithItsShell(t *testing.T) {
	for _, sc := range sessionShells(t) {
		t.Run(sc.name, func(t *testing.T) {
			sessionEnv(t, sc)
			c := pair(t)
			for _, tc := range []struct {
				script string
				code   int
			}{
				{"exit 3", 3},
				{"set -e; false; echo not", 1},
				{"exec true", 0},
				{"kill -9 $$", 137},
			} {
				first := srun(t, c, "e", "cd /", nil)
				r := srun(t, c, "e", tc.script, nil)
				if r.runErr != nil || r.Code != tc.code || r.Session == nil || r.Session.Ended == "" || strings.Contains(r.out, "not") {
					t.Fatalf("%q: %+v %v out %q err %q", tc.script, r.Result, r.runErr, r.out, r.err)
				}
				next := srun(t, c, "e", "pwd", nil)
				if !next.Session.New || next.Session.ID == first.Session.ID || next.Session.Reset == "" {
					t.Fatalf("after %q: %+v", tc.script, next.Session)
				}
			}
			closeSession(t, c, "e")
		})
	}
}

func TestSessionOutlivesItsAgent(t *testing.T) {
	sc := sessionShells(t)[0]
	sessionEnv(t, sc)
	dir := t.TempDir()
	c1 := pair(t)
	first := srun(t, c1, "live", "cd "+dir+"; Y=1", nil)
	c1.Close()
	c2 := pair(t)
	r := srun(t, c2, "live", `pwd; echo $Y`, nil)
	if r.out != dir+"\n1\n" || r.Session.New || r.Session.ID != first.Session.ID {
		t.Fatalf("a new agent: %+v %q %q", r.Session, r.out, r.err)
	}
	// An agent gone mid-script stops it; the session lives.
	c3 := pair(t)
	go func() { time.Sleep(300 * time.Millisecond); c3.Close() }()
	gone := srun(t, c3, "live", "sleep 20; echo after", nil)
	if gone.runErr == nil {
		t.Fatalf("a closed channel returned %+v", gone.Result)
	}
	var after sres
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		after = srun(t, c2, "live", `echo $Y`, nil)
		if after.out == "1\n" || time.Now().After(deadline) {
			break
		}
	}
	if after.out != "1\n" || after.Session.New {
		t.Fatalf("after its agent went mid-script: %+v %q %q", after.Session, after.out, after.err)
	}
	closeSession(t, c2, "live")
}

func TestSessionConcurrentCallersAreSerialized(t *testing.T) {
	sc := sessionShells(t)[0]
	sessionEnv(t, sc)
	c := pair(t)
	srun(t, c, "q", "n=0", nil)
	var wg sync.WaitGroup
	errs := make(chan string, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Read-modify-write: lost updates if two ran at once.
			r := srun(t, c, "q", `v=$n; sleep 0.01; n=$((v+1))`, nil)
			if r.runErr != nil || r.Code != 0 {
				errs <- r.err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if r := srun(t, c, "q", `echo $n`, nil); r.out != "20\n" {
		t.Fatalf("n = %q after 20 increments", r.out)
	}
	closeSession(t, c, "q")
}

func TestSessionListAndClose(t *testing.T) {
	sc := sessionShells(t)[0]
	sessionEnv(t, sc)
	c := pair(t)
	dir := t.TempDir()
	srun(t, c, "one", "cd "+dir, nil)
	srun(t, c, "two", "true", nil)
	l := srun(t, c, "", "", func(r *Request) { r.Start.Op = wire.SessionOpList })
	var infos []wire.SessionInfo
	for _, line := range strings.Split(strings.TrimSpace(l.out), "\n") {
		var in wire.SessionInfo
		if err := json.Unmarshal([]byte(line), &in); err != nil {
			t.Fatalf("list: %v: %q", err, l.out)
		}
		infos = append(infos, in)
	}
	if len(infos) != 2 || infos[0].Name != "one" || infos[0].Cwd != dir || infos[1].Name != "two" || infos[0].Busy {
		t.Fatalf("list: %+v", infos)
	}
	closeSession(t, c, "one")
	l = srun(t, c, "", "", func(r *Request) { r.Start.Op = wire.SessionOpList })
	if strings.Contains(l.out, `"one"`) || !strings.Contains(l.out, `"two"`) {
		t.Fatalf("after close: %q", l.out)
	}
	// Closed is not reset: the next one is new, with nothing to report.
	if r := srun(t, c, "one", "pwd", nil); !r.Session.New || r.Session.Reset != "" || r.out == dir+"\n" {
		t.Fatalf("after close: %+v %q", r.Session, r.out)
	}
	bad := srun(t, c, "../x", "true", nil)
	if bad.Code != 2 || !strings.Contains(bad.Failure.Msg, "bad session name") || bad.err != "" {
		t.Fatalf("bad name: %+v %q (want the failure in the exit, not as the script's stderr)", bad.Result, bad.err)
	}
	none := srun(t, c, "never", "", func(r *Request) { r.Start.Op = wire.SessionOpClose })
	if none.Code != 1 || !strings.Contains(none.err, "no such session") {
		t.Fatalf("closing none: %+v %q", none.Result, none.err)
	}
	closeSession(t, c, "one")
	closeSession(t, c, "two")
}

var _ = errors.New
