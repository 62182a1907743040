package fakebin_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/fakebin"
	"github.com/hsbx/hsbx/runtime"
	"github.com/hsbx/hsbx/runtime/docker"
	"github.com/hsbx/hsbx/runtime/enginecli"
	"github.com/hsbx/hsbx/runtime/podman"
)

// steps replays scripts/capture.sh: setup commands (prefixed "!") and the
// captured cases, in the order the script ran them.
var steps = []string{
	"!run -d --init --name cap-run --label hermes-agent=1 --label hermes-task-id=t1 --label hermes-profile=default --label weird=a,b=c --network none hsbx-busybox sleep infinity",
	"!run --name cap-exit --label hermes-agent=1 --network none hsbx-busybox sh -c exit_3",
	"!create --name cap-created --label hermes-agent=1 --network none hsbx-busybox sleep 1",
	"!run -d --name cap-paused --network none hsbx-busybox sleep infinity",
	"!pause cap-paused",
	"version_flag", "version", "info", "ps_all", "ps_label", "ps_exited", "ps_none",
	"inspect_all", "inspect_missing", "inspect_none", "start_missing", "start_running",
	"stop_missing", "stop_stopped", "rm_missing_force", "rm_missing", "rm_running", "rm_multi",
	"run_name_in_use", "run_bad_image", "run_bad_flag", "run_unknown_runtime", "run_missing_runtime_path", "exec_missing", "exec_stopped", "exec_paused",
	"exec_not_found", "exec_not_executable", "exec_exit125", "exec_exit1", "exec_bad_workdir",
	"cp_out_missing", "cp_out_missing_stream", "cp_in_missing_parent", "cp_in_stream_missing_dir", "pull_missing",
	"unpause_running", "pause_paused", "image_inspect", "image_inspect_missing", "exec_words_notfound",
	"!run -d --name cap-stop --network none hsbx-busybox sleep infinity",
	"stop_running", "rm_stopped",
	"!create --name cap-batch1 --network none hsbx-busybox true",
	"!run -d --name cap-batch2 --network none hsbx-busybox sleep infinity",
	"!create --name cap-batch3 --network none hsbx-busybox true",
	"rm_batch_running", "rm_batch_missing", "ps_after_batch",
	"!rm -f cap-batch2",
	"!rm -f cap-run cap-exit cap-created cap-paused cap-stop",
	"!run -d --name cap-snap --label hsbx.key=k --network none hsbx-busybox sleep infinity",
	"commit_pause", "commit", "image_ls_label", "image_inspect_commit",
	"!run -d --name cap-snap2 --network none cap-snapshot:one sleep infinity",
	"image_rm_in_use",
	"!commit --pause=false cap-snap2 cap-snapshot:two",
	"!rm -f cap-snap2",
	"image_rm_child", "image_rm_missing", "commit_missing",
	"!rm -f cap-snap",
	"volume_create", "volume_create_again", "volume_inspect", "volume_inspect_missing", "volume_inspect_none", "volume_ls_label",
	"!run -d --name cap-vol --mount type=volume,source=cap-vol-a,target=/w --mount type=volume,source=cap-vol-auto,target=/v --network none hsbx-busybox sleep infinity",
	"volume_inspect_auto", "volume_rm_in_use",
	"!rm -f cap-vol",
	"volume_rm_missing", "volume_rm_none",
	"down_ps", "down_version", "down_info", "down_run", "down_exec",
}

func TestFakesMatchCapturedEngines(t *testing.T) {
	for _, tc := range []struct {
		fake, dir string
		d         enginecli.Dialect
	}{
		{"docker", "docker-client28.2.2-engine20.10.24", docker.Dialect{}},
		{"podman", "podman-4.3.1", podman.Dialect{}},
	} {
		t.Run(tc.fake, func(t *testing.T) {
			dir := filepath.Join("..", "testdata", "engines", tc.dir)
			state := t.TempDir()
			env := []string{"FAKEENGINE_DIR=" + state, "FAKEENGINE_EXEC_INPROCESS=1"}
			run := func(args []string, extraEnv ...string) (string, string, int) {
				var out, errb bytes.Buffer
				code := fakebin.Run(tc.fake, args, append(env, extraEnv...), strings.NewReader(""), &out, &errb)
				return out.String(), errb.String(), code
			}
			compared := 0
			defer func() {
				if compared < 35 {
					t.Errorf("only %d captured cases compared; the captures or the step list are incomplete", compared)
				}
			}()
			for _, step := range steps {
				if setup, ok := strings.CutPrefix(step, "!"); ok {
					args := strings.Fields(strings.ReplaceAll(setup, "exit_3", "'exit 3'"))
					if strings.Contains(setup, "exit_3") {
						args = []string{"run", "--name", "cap-exit", "--label", "hermes-agent=1", "--network", "none", "hsbx-busybox", "sh", "-c", "exit 3"}
					}
					if _, e, code := run(args); code != 0 && !strings.HasPrefix(setup, "run --name cap-exit") {
						t.Fatalf("setup %q: exit %d: %s", setup, code, e)
					}
					continue
				}
				argvB, err := os.ReadFile(filepath.Join(dir, step+".argv"))
				if err != nil {
					continue // this engine has no such case
				}
				args := strings.Split(strings.TrimSuffix(string(argvB), "\n"), "\n")
				var extra []string
				if strings.HasPrefix(step, "down_") {
					extra = []string{"DOCKER_HOST=unix:///nonexistent/docker.sock", "CONTAINER_HOST=unix:///nonexistent/podman.sock"}
				}
				realOut, _ := os.ReadFile(filepath.Join(dir, step+".stdout"))
				realErr, _ := os.ReadFile(filepath.Join(dir, step+".stderr"))
				codeB, _ := os.ReadFile(filepath.Join(dir, step+".exit"))
				realCode, _ := strconv.Atoi(strings.TrimSpace(string(codeB)))

				out, errOut, code := run(args, extra...)
				compared++
				if code != realCode {
					t.Errorf("%s: fake exit %d, real %d\nfake stderr: %s\nreal stderr: %s", step, code, realCode, errOut, realErr)
					continue
				}
				op := opOf(args)
				if realCode != 0 {
					want := tc.d.Classify(op, realCode, string(realErr))
					got := tc.d.Classify(op, code, errOut)
					if !errors.Is(got, want) || (want == nil) != (got == nil) {
						t.Errorf("%s: fake stderr classifies as %v, real as %v\nfake: %s\nreal: %s", step, got, want, errOut, realErr)
					}
				}
				if (len(strings.TrimSpace(string(realOut))) == 0) != (len(strings.TrimSpace(out)) == 0) && op != enginecli.OpStart {
					t.Errorf("%s: stdout presence differs\nfake: %q\nreal: %q", step, out, realOut)
				}
				compareParsed(t, step, tc.d, op, []byte(out), realOut)
			}
		})
	}
}

func opOf(args []string) enginecli.Op {
	for _, a := range args {
		switch a {
		case "volume":
			return enginecli.OpVolume
		case "ps":
			return enginecli.OpPS
		case "inspect":
			return enginecli.OpInspect
		case "run":
			return enginecli.OpRun
		case "start":
			return enginecli.OpStart
		case "stop":
			return enginecli.OpStop
		case "rm":
			return enginecli.OpRemove
		case "exec":
			return enginecli.OpExec
		case "version":
			return enginecli.OpVersion
		case "image":
			return enginecli.OpImage
		case "commit":
			return enginecli.OpCommit
		case "cp":
			return enginecli.OpCopy
		case "pull":
			return enginecli.OpPull
		case "info":
			return enginecli.OpInfo
		case "pause", "unpause":
			return enginecli.OpUnpause
		}
	}
	return ""
}

// compareParsed checks the fake's output parses like the real one: the
// same containers (by name, for the cap-* set) in the same states.
func compareParsed(t *testing.T, step string, d enginecli.Dialect, op enginecli.Op, fake, captured []byte) {
	t.Helper()
	var parse func([]byte) ([]runtime.Container, error)
	switch op {
	case enginecli.OpPS:
		parse = d.ParsePS
	case enginecli.OpInspect:
		parse = enginecli.ParseInspect
	case enginecli.OpInfo:
		_, rerr := d.ParseInfo(captured)
		_, ferr := d.ParseInfo(fake)
		if (rerr == nil) != (ferr == nil) {
			t.Errorf("%s: ParseInfo real err %v, fake err %v", step, rerr, ferr)
		}
		return
	case enginecli.OpImage:
		ri, rerr := enginecli.ParseImageInspect(captured)
		fi, ferr := enginecli.ParseImageInspect(fake)
		if (rerr == nil) != (ferr == nil) || len(ri.Entrypoint) != len(fi.Entrypoint) || !maps.Equal(ri.Labels, fi.Labels) {
			t.Errorf("%s: ParseImageInspect real %+v %v, fake %+v %v", step, ri, rerr, fi, ferr)
		}
		return
	case enginecli.OpVolume:
		if !strings.Contains(step, "inspect") {
			return
		}
		rv, rerr := enginecli.ParseVolumes(captured)
		fv, ferr := enginecli.ParseVolumes(fake)
		if (rerr == nil) != (ferr == nil) || len(rv) != len(fv) {
			t.Errorf("%s: ParseVolumes real %+v %v, fake %+v %v", step, rv, rerr, fv, ferr)
			return
		}
		for i := range rv {
			if rv[i].Name != fv[i].Name || !maps.Equal(rv[i].Labels, fv[i].Labels) {
				t.Errorf("%s: volume %d: real %+v, fake %+v", step, i, rv[i], fv[i])
			}
		}
		return
	case enginecli.OpCommit:
		rid, fid := enginecli.ImageID(string(captured)), enginecli.ImageID(string(fake))
		if len(rid) != len(fid) {
			t.Errorf("%s: commit printed %q, real %q", step, fake, captured)
		}
		return
	case enginecli.OpVersion:
		rv, rerr := d.ParseVersion(captured)
		fv, ferr := d.ParseVersion(fake)
		if (rerr == nil) != (ferr == nil) || (rv.Server == "") != (fv.Server == "") {
			t.Errorf("%s: ParseVersion real %+v %v, fake %+v %v", step, rv, rerr, fv, ferr)
		}
		return
	default:
		return
	}
	rc, rerr := parse(captured)
	fc, ferr := parse(fake)
	if (rerr == nil) != (ferr == nil) {
		t.Fatalf("%s: parse real err %v, fake err %v", step, rerr, ferr)
	}
	states := func(cs []runtime.Container) map[string]runtime.State {
		m := map[string]runtime.State{}
		for _, c := range cs {
			if strings.HasPrefix(c.Name, "cap-") {
				m[c.Name] = c.State
			}
		}
		return m
	}
	rs, fs := states(rc), states(fc)
	if len(rs) != len(fs) {
		t.Errorf("%s: real containers %v, fake %v", step, rs, fs)
	}
	if op == enginecli.OpInspect { // network mode and live exec sessions, as the engine reports them
		facts := func(cs []runtime.Container) map[string]string {
			m := map[string]string{}
			for _, c := range cs {
				m[c.Name] = fmt.Sprintf("network=%s execs=%v", c.NetworkMode, len(c.ExecIDs) > 0)
			}
			return m
		}
		rf, ff := facts(rc), facts(fc)
		for name, f := range rf {
			if strings.HasPrefix(name, "cap-") && ff[name] != f {
				t.Errorf("%s: %s real %s, fake %s", step, name, f, ff[name])
			}
		}
	}
	for name, st := range rs {
		if fs[name] != st {
			t.Errorf("%s: %s real state %s, fake %s", step, name, st, fs[name])
		}
	}
}
