// Command bench measures hsbx against the raw engine CLI and against the
// Hermes backend's reaper algorithm, side by side in one run, on the real
// engines scripts/engines.sh set up, and writes BENCHMARKS.md. Every figure
// is a median over repeated, interleaved runs (hsbx, raw, hsbx, raw, ...)
// unless the table says otherwise. Run it with `make bench`.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hsbx/hsbx/internal/proc"
	"github.com/hsbx/hsbx/reaper"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/detect"
	"github.com/hsbx/hsbx/runtime/enginecli"
	"github.com/hsbx/hsbx/sandbox"
)

var (
	hsbxBin = flag.String("hsbx", "bin/hsbx", "the hsbx binary to measure")
	out     = flag.String("out", "BENCHMARKS.md", "where to write the report")
	runs    = flag.Int("runs", 15, "repetitions for the warm measurements")
	cold    = flag.Int("cold-runs", 7, "repetitions for the cold up")
	scale   = flag.String("scale", "10,50,200", "orphan counts for the reaper benchmark")
	only    = flag.String("engines", "docker,podman", "engines to measure")
	// memCommands is how many commands the exec channel's memory check runs.
	memCommands = flag.Int("mem-commands", 10000, "commands for the exec channel's memory check")
	snapOnly    = flag.Bool("snapshots-only", false, "measure only the snapshot rows (a quick check; the report has nothing else)")
	remoteOnly  = flag.Bool("remote-only", false, "measure only the rows of the docker engine reached over ssh (scripts/engines-remote.sh; a quick check)")
	brokerOnly  = flag.Bool("broker-only", false, "measure only the brokered secret's row (a quick check, e.g. of two builds' -hsbx; the report has nothing else)")
	small       = flag.Bool("small", false, "the smoke (CI): every big transfer (stdout, stdin, downloads, forwards, snapshots) at a fiftieth of its size, at least 1 MB, and 20 sessions at scale instead of 200; proves the harness end to end, gives no figure to quote")
	kube        = flag.Bool("kube", false, "also measure the kubectl runtime on the cluster scripts/kube.sh set up (KUBECONFIG, HSBX_IT_KUBECTL)")
)

type engine struct {
	name, bin, image, version string
	rt                        runtime.Runtime
	env                       []string // hsbx's environment for this engine
	profile                   string
	channelExec               time.Duration // warm exec through the channel (median)
	firstExec                 time.Duration // first exec of a fresh sandbox, channel on (median)
	rawExec                   string        // the raw exec baseline, as the tables name it
	// execIn is the engine's own exec of argv in the sandbox id, no hsbx
	// involved (nil: BIN exec ID).
	execIn func(id string, argv ...string) []string
	// beforeCold runs before each of hsbx's cold ups (nil: nothing).
	beforeCold func()
}

// engineExec is e's own exec of argv in the sandbox id.
func (e *engine) engineExec(id string, argv ...string) []string {
	if e.execIn != nil {
		return e.execIn(id, argv...)
	}
	return append([]string{e.bin, "exec", id}, argv...)
}

var runner = &proc.Runner{}

func run(ctx context.Context, env []string, argv ...string) proc.Result {
	res, err := runner.Run(ctx, proc.Cmd{Argv: argv, Env: env, Timeout: 5 * time.Minute})
	if err != nil {
		fail("%s: %v", proc.Quote(argv), err)
	}
	return res
}

func must(ctx context.Context, env []string, argv ...string) proc.Result {
	res := run(ctx, env, argv...)
	if res.ExitCode != 0 {
		fail("%s: exit %d: %s", proc.Quote(argv), res.ExitCode, res.Stderr)
	}
	return res
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
	os.Exit(1)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// row is one line of a comparison table.
type row struct {
	what, hsbx, base, ratio, target, verdict string
}

func ratioRow(what string, h, b time.Duration, target float64, note string) row {
	r := float64(h) / float64(b)
	v := "met"
	if r > target {
		v = "**missed**"
	}
	if note != "" {
		v += "; " + note
	}
	return row{what, ms(h), ms(b), fmt.Sprintf("%.3f", r), fmt.Sprintf("≤ %.2f", target), v}
}

func main() {
	flag.Parse()
	ctx := context.Background()
	hb, err := filepath.Abs(*hsbxBin)
	if err != nil {
		fail("%v", err)
	}
	*hsbxBin = hb
	image := os.Getenv("HSBX_IT_IMAGE")
	var engines []*engine
	for _, name := range strings.Split(*only, ",") {
		if name == "" || *remoteOnly {
			continue // -engines "" -kube: the cluster only
		}
		bin := os.Getenv("HSBX_IT_" + strings.ToUpper(name))
		if bin == "" || image == "" {
			fail("real %s not configured: run `make engines` and source /tmp/hsbx-engines/env.sh (HSBX_IT_%s)", name, strings.ToUpper(name))
		}
		engines = append(engines, setup(ctx, name, bin, image))
	}
	foot := ""
	if len(engines) > 0 {
		foot = footprint(ctx, engines[0]) // before any cleanup: it uses the warm sandbox
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\nWritten by `make bench` (bench/main.go) on %s: %d cores (%s/%s), kernel %s, Go %s.\n",
		time.Now().UTC().Format("2006-01-02"), goruntime.NumCPU(), goruntime.GOOS, goruntime.GOARCH, kernel(), goruntime.Version())
	fmt.Fprintf(&b, "Each ratio is hsbx's median over the baseline's median, measured interleaved (hsbx, baseline, hsbx, ...) in the same run: %d runs for warm figures, %d for cold `up`. Lower is better.\n\n", *runs, *cold)
	for _, e := range engines {
		fmt.Fprintf(&b, "## %s %s (`%s`)\n\n", e.name, e.version, e.bin)
		id := strings.TrimSpace(string(must(ctx, e.env, e.hsbx("up", "--task", "warm")...).Stdout))
		e.rawExec = e.name + " exec ID true"
		raw := func() time.Duration { return must(ctx, os.Environ(), e.bin, "exec", id, "true").Elapsed }
		if *snapOnly || *brokerOnly {
			if *snapOnly {
				writeRows(&b, snapshotRows(ctx, e))
			} else {
				writeRows(&b, brokerRow(ctx, e))
			}
			cleanup(ctx, e)
			continue
		}
		lib, libTimes := libraryExec(ctx, e, func(id string) []string { return []string{e.bin, "exec", "-i", id, "sh"} })
		rows := warmExecRows(ctx, e, raw, libTimes)
		rows = append(rows, lib)
		rows = append(rows, sessionRows(ctx, e, []string{e.bin, "exec", id}, e.name+" exec ID")...)
		rows = append(rows, warmUp(ctx, e), coldUp(ctx, e), firstExec(ctx, e))
		rows = append(rows, afterRestart(ctx, e)...)
		rows = append(rows, bigOutput(ctx, e, append([]string{e.bin, "exec", id}, bigArgv()...)),
			bigInput(ctx, e, append([]string{e.bin, "exec", "-i", id}, inputArgv...)))
		rows = append(rows, smallCopies(ctx, e, e.name+" cp", func(src, dst string) []string {
			return []string{e.bin, "cp", strings.Replace(src, ":", id+":", 1), strings.Replace(dst, ":", id+":", 1)}
		})...)
		rows = append(rows, recordCost(ctx, e))
		rows = append(rows, forwardRows(ctx, e)...)
		rows = append(rows, gvisorRows(ctx, e)...)
		rows = append(rows, egressRows(ctx, e)...)
		rows = append(rows, brokerRow(ctx, e)...)
		rows = append(rows, snapshotRows(ctx, e)...)
		writeRows(&b, rows)
		mem, viaHolder := channelMemory(ctx, e, id)
		b.WriteString(channelGaps(e, versionStart(ctx, e), viaHolder, libTimes))
		b.WriteString(mem)
		b.WriteString(reapAtScale(ctx, e))
		b.WriteString(sessionScale(ctx, e))
		b.WriteString(concurrency(ctx, e))
		cleanup(ctx, e)
	}
	if *kube && !*remoteOnly {
		b.WriteString(kubeBench(ctx))
	}
	if !*snapOnly && !*brokerOnly {
		b.WriteString(remoteBench(ctx, image)) // last: it points the process's environment at the remote engine
	}
	b.WriteString(foot)
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		fail("%v", err)
	}
	fmt.Print(b.String())
}

// writeRows writes a comparison table.
func writeRows(b *strings.Builder, rows []row) {
	b.WriteString("| measurement | hsbx | baseline | ratio | target | |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", r.what, r.hsbx, r.base, r.ratio, r.target, r.verdict)
	}
	b.WriteString("\n")
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

func setup(ctx context.Context, name, bin, image string) *engine {
	f, err := detect.Find(ctx, detect.Options{Runtime: bin, Engine: enginecli.Options{Env: os.Environ()}})
	if err != nil {
		fail("%v", err)
	}
	rt := detect.New(f, detect.Options{Engine: enginecli.Options{Env: os.Environ()}})
	info, err := rt.Info(ctx)
	if err != nil {
		fail("%s: %v", name, err)
	}
	dir, _ := os.MkdirTemp("", "hsbx-bench-")
	e := &engine{name: name, bin: bin, image: image, version: info.ServerVersion, rt: rt,
		profile: fmt.Sprintf("bench%d", time.Now().UnixNano()%1e6)}
	e.env = append(os.Environ(), "HSBX_RUNTIME="+bin, "HSBX_PROFILE="+e.profile, "TERMINAL_DOCKER_IMAGE="+image,
		"XDG_STATE_HOME="+filepath.Join(dir, "state"), "XDG_CACHE_HOME="+filepath.Join(dir, "cache"),
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "XDG_RUNTIME_DIR="+filepath.Join(dir, "run"), "HOME="+dir)
	if err := os.Mkdir(filepath.Join(dir, "run"), 0o700); err != nil {
		fail("%v", err)
	}
	// First call: caches the dialect, engine facts and the sweep window.
	must(ctx, e.env, *hsbxBin, "up", "--task", "prime")
	return e
}

// sized is a transfer's size in bytes: full, or a fiftieth (at least
// 1 MB) under -small.
func sized(full int) int {
	if *small {
		return max(full/50, 1<<20)
	}
	return full
}

// mb names a size in the rows' words: "300 MB".
func mb(n int) string { return fmt.Sprintf("%d MB", (n+500_000)/1_000_000) }

func (e *engine) hsbx(args ...string) []string { return append([]string{*hsbxBin}, args...) }

// pair runs a and b interleaved n times and returns their medians.
func pair(ctx context.Context, e *engine, n int, a, b func() time.Duration) (time.Duration, time.Duration) {
	var as, bs []time.Duration
	for i := 0; i < n; i++ {
		as = append(as, a())
		bs = append(bs, b())
	}
	return median(as), median(bs)
}

func warmUp(ctx context.Context, e *engine) row {
	key := sandbox.Key{Profile: e.profile, Task: "warm"}
	format := "{{json .}}"
	if e.rt.Dialect() == runtime.Podman {
		format = "json"
	}
	ps := []string{e.bin, "ps", "-a", "--no-trunc", "--format", format}
	for _, f := range key.Filters() {
		ps = append(ps, "--filter", "label="+f)
	}
	h, b := pair(ctx, e, *runs,
		func() time.Duration { return must(ctx, e.env, e.hsbx("up", "--task", "warm")...).Elapsed },
		func() time.Duration { return must(ctx, os.Environ(), ps...).Elapsed })
	return ratioRow("warm `up` vs one `"+e.name+" ps` with the same filters", h, b, 1.1, "")
}

// coldUp compares creating a sandbox with a raw `run` of the very same
// arguments (the ones hsbx passed, read from its debug log), each removed
// after, untimed.
func coldUp(ctx context.Context, e *engine) row {
	// hsbx's own create, once, untimed: its argv is the baseline's.
	res := must(ctx, e.env, e.hsbx("--log-level", "debug", "up", "--task", "rawargs")...)
	must(ctx, e.env, e.hsbx("down", "--task", "rawargs")...)
	var argv []string
	for _, line := range strings.Split(string(res.Stderr), "\n") {
		if a := loggedArgv(line); len(a) > 2 && a[1] == "run" {
			argv = a
		}
	}
	if argv == nil {
		fail("no run in hsbx's debug log:\n%s", res.Stderr)
	}
	nameAt := slices.Index(argv, "--name") + 1
	if nameAt == 0 {
		fail("no --name in hsbx's run: %q", argv)
	}
	i := 0
	h, b := pair(ctx, e, *cold,
		func() time.Duration {
			i++
			task := fmt.Sprintf("cold%d", i)
			if e.beforeCold != nil {
				e.beforeCold()
			}
			d := must(ctx, e.env, e.hsbx("up", "--task", task)...).Elapsed
			// --purge: the key's volumes too (storage = volume), so a
			// later row's up of the same task makes its own.
			must(ctx, e.env, e.hsbx("down", "--purge", "--task", task)...)
			return d
		},
		func() time.Duration {
			raw := slices.Clone(argv)
			raw[nameAt] = fmt.Sprintf("%s-raw%d", e.profile, i)
			d := must(ctx, os.Environ(), raw...).Elapsed
			must(ctx, os.Environ(), e.bin, "rm", "-f", raw[nameAt])
			return d
		})
	return ratioRow("cold `up` (creates) vs `"+e.name+" run -d` with the same arguments", h, b, 1.15, "")
}

// loggedArgv reads the argv of an "engine call" line of hsbx's debug log
// (argv="..." holds proc.Quote's words: bare, or Go-quoted).
func loggedArgv(line string) []string {
	_, rest, ok := strings.Cut(line, `msg="engine call" argv=`)
	if !ok {
		return nil
	}
	quoted, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return nil
	}
	words, _ := strconv.Unquote(quoted)
	var argv []string
	for words != "" {
		if words[0] == '"' {
			q, err := strconv.QuotedPrefix(words)
			if err != nil {
				return nil
			}
			w, _ := strconv.Unquote(q)
			argv, words = append(argv, w), strings.TrimPrefix(words[len(q):], " ")
			continue
		}
		w, after, _ := strings.Cut(words, " ")
		argv, words = append(argv, w), after
	}
	return argv
}

// ownTime is hsbx's own share of a warm call: its wall time minus the
// elapsed time of the one engine call it logs at debug level.
func ownTime(ctx context.Context, e *engine, env []string, args ...string) time.Duration {
	var own []time.Duration
	for i := 0; i < *runs; i++ {
		var log bytes.Buffer
		res, err := runner.Run(ctx, proc.Cmd{Argv: e.hsbx(append([]string{"--log-level", "debug"}, args...)...), Env: env, Stderr: &log, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			fail("%v: %s", err, log.String())
		}
		var engine time.Duration
		for _, f := range strings.Fields(log.String()) {
			if v, ok := strings.CutPrefix(f, "elapsed="); ok {
				d, _ := time.ParseDuration(v)
				engine += d
			}
		}
		own = append(own, res.Elapsed-engine)
	}
	return median(own)
}

// versionStart is the median start-up of `hsbx version`, which does no work.
func versionStart(ctx context.Context, e *engine) time.Duration {
	var starts []time.Duration
	for i := 0; i < 30; i++ {
		starts = append(starts, must(ctx, e.env, *hsbxBin, "version").Elapsed)
	}
	return median(starts)
}

func footprint(ctx context.Context, e *engine) string {
	var b strings.Builder
	st, err := os.Stat(*hsbxBin)
	if err != nil {
		fail("%v", err)
	}
	var starts, trues []time.Duration
	for i := 0; i < 30; i++ {
		starts = append(starts, must(ctx, e.env, *hsbxBin, "version").Elapsed)
		trues = append(trues, must(ctx, e.env, "/bin/true").Elapsed)
	}
	must(ctx, e.env, e.hsbx("exec", "--task", "warm", "--", "true")...)
	channelUp(ctx, e, "warm") // the warm path: no engine client under hsbx
	var rss []int64
	for i := 0; i < 5; i++ {
		rss = append(rss, must(ctx, e.env, e.hsbx("exec", "--task", "warm", "--", "true")...).MaxRSSKB)
	}
	slices.Sort(rss)
	fmt.Fprintf(&b, "## Footprint\n\n| | |\n|---|---|\n| binary size | %.1f MiB |\n| `hsbx version` start-up (median of 30) | %s |\n| `/bin/true` start-up, for scale (median of 30) | %s |\n| peak RSS of `hsbx exec -- true` (median of 5) | %.1f MiB |\n\n",
		float64(st.Size())/(1<<20), ms(median(starts)), ms(median(trues)), float64(rss[len(rss)/2])/1024)
	upOwn, execOwn := ownTime(ctx, e, e.env, "up", "--task", "warm"), ownTime(ctx, e, e.plainEnv(), "exec", "--task", "warm", "--", "true")
	fmt.Fprintf(&b, "### Where the warm-path gaps come from\n\n"+
		"A warm `up` and a warm `exec` on the plain path make exactly the one engine call the raw baseline makes (the fakes' argv log asserts it in `make test`; through the exec channel, a warm exec makes none). "+
		"What hsbx adds is itself: its wall time minus the engine call it makes is %s for a warm `up` and %s for a warm `exec` here (median of %d, %s). "+
		"Most of that is starting one more process: `hsbx version`, which does no work, takes %s against %s for `/bin/true`; "+
		"the rest is parsing the command line (kong builds its command model for `up`; exec's common form is read without it), reading the configuration and the cached engine facts. "+
		"The targets allow 10%% of a 60–80 ms `ps` and 5%% of a 150–250 ms `exec`: less than one extra process start plus that setup takes on this machine, "+
		"and there is no engine call left to save on these paths.\n\n",
		ms(upOwn), ms(execOwn), *runs, e.name, ms(median(starts)), ms(median(trues)))
	return b.String()
}

// cleanup removes the run's containers. Each is stopped at once first: a
// force-remove of running ones waits out each one's stop grace, and a
// run's many (podman removes a few at a time) took longer than the
// engine call's bound — the client was killed and the oldest, the
// prime and warm sandboxes, were left running after every run.
func cleanup(ctx context.Context, e *engine) {
	_, _ = (&reaper.Sweeper{RT: e.rt}).Sweep(ctx, reaper.Options{Profile: e.profile, MaxAge: time.Millisecond, Now: time.Now()}, false)
	for try := range 4 {
		cs, _ := e.rt.List(ctx, runtime.ListOptions{Labels: []string{"hermes-profile=" + e.profile}})
		if len(cs) == 0 {
			return
		}
		if try == 3 {
			break // three removals tried; what is listed now is left
		}
		var ids []string
		var wg sync.WaitGroup
		for _, c := range cs {
			ids = append(ids, c.ID)
			if c.State == runtime.StateRunning {
				wg.Go(func() { _ = e.rt.Stop(ctx, c.ID, 0) })
			}
		}
		wg.Wait()
		_ = e.rt.Remove(ctx, true, ids...)
	}
	fmt.Fprintf(os.Stderr, "bench: %s: containers of profile %s are left after three tries to remove them\n", e.name, e.profile)
}
