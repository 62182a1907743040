package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// viaJSON is what encoding/json makes of p for a v of the same type.
func viaJSON[T any](t *testing.T, p []byte) (T, error) {
	t.Helper()
	var v T
	err := json.Unmarshal(p, &v)
	return v, err
}

// EncodeStart writes what encoding/json reads as it reads json.Marshal's.
func TestEncodeStartReadsAsMarshals(t *testing.T) {
	for _, st := range []Start{
		{},
		{Argv: []string{"true"}},
		{Argv: []string{}, Env: []string{}, FDs: []string{}},
		{Argv: []string{"sh", "-c", `echo "a\b" 'c' <&> $X`}, Env: []string{"X=a,b", "Y=k=v"}, Dir: "/w s", Stdin: true,
			Marker: "HSBX_EXEC_MARK=abc", FDs: []string{"stdout", "stderr"}},
		{Session: "default", Script: "cd /tmp\n\techo \x00\x01\x1f\x7f ok", Op: SessionOpList, SessionIdleMS: -5},
		{Argv: []string{"id"}, User: "nobody:nogroup"},
		{Argv: []string{"bad \xff\xfe utf-8", "é\u2028\U0001F600", "\xed\xa0\x80"}},
	} {
		got, err := viaJSON[Start](t, EncodeStart(st))
		if err != nil {
			t.Fatalf("%q: %v", EncodeStart(st), err)
		}
		m, _ := json.Marshal(st)
		want, _ := viaJSON[Start](t, m)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("EncodeStart(%+v) = %s\nreads as %+v\nwant     %+v", st, EncodeStart(st), got, want)
		}
	}
}

// What json.Marshal writes for a Hello or an Exit, the decoders read the
// same.
func TestDecodeReadsWhatMarshalWrites(t *testing.T) {
	for _, h := range []Hello{{}, {Proto: 3, Build: "hsbx 1.2 <dev> & \u2028", Down: true, DeadAfterMS: 1 << 40, AgentSinceMS: -1}} {
		m, _ := json.Marshal(h)
		var got Hello
		if err := DecodeHello(m, &got); err != nil || got != h {
			t.Errorf("DecodeHello(%s) = %+v, %v; want %+v", m, got, err, h)
		}
	}
	for _, e := range []Exit{{}, {Code: 137, Killed: 2}, {Code: -1, Error: "agent gone: \"x\"\n", NotDelivered: true},
		{WriteFailed: "stdout", WriteError: "write |1: broken pipe", BrokenPipe: true},
		{Session: &SessionNote{ID: "s1", New: true, Reset: "the shell died", Ended: "exit"}}, {Session: &SessionNote{}}} {
		m, _ := json.Marshal(e)
		var got Exit
		if err := DecodeExit(m, &got); err != nil || !reflect.DeepEqual(got, e) {
			t.Errorf("DecodeExit(%s) = %+v, %v; want %+v", m, got, err, e)
		}
	}
}

// Table: what the decoders take and what they refuse. Whatever they take
// encoding/json reads the same (checked too).
func TestDecodeExitCases(t *testing.T) {
	for _, c := range []struct {
		in   string
		want *Exit // nil: refused
	}{
		{`{"code":3}`, &Exit{Code: 3}},
		{" \n{ \"code\" : 3 , \"killed\":1 }\t", &Exit{Code: 3, Killed: 1}},
		{`{"code":3,"future":{"a":[1,2.5e3,"x",null,true,{"é":false}]},"later":"v"}`, &Exit{Code: 3}},
		{`{"code":null,"session":null,"error":null}`, &Exit{}},
		{`{"co\u0064e":4}`, &Exit{Code: 4}},
		{`{"error":"\ud83d\ude00 \ud800 \u00e9 \/ \b\f\n\r\t"}`, &Exit{Error: "\U0001F600 \uFFFD \u00e9 / \b\f\n\r\t"}},
		{"{\"error\":\"bad \xff utf-8\"}", &Exit{Error: "bad \uFFFD utf-8"}},
		{`{"code":-0}`, &Exit{}},
		{`{"code":126,"failed":"unable to find user x","no_user":true}`, &Exit{Code: 126, Failed: "unable to find user x", NoUser: true}},
		{`{"code":0,"stdout_bytes":12,"stderr_bytes":3,"stdin_bytes":4096}`, &Exit{StdoutBytes: 12, StderrBytes: 3, StdinBytes: 4096}},
		{`{}`, &Exit{}},
		{``, nil},
		{`null`, nil},
		{`[]`, nil},
		{`{"code":3}x`, nil},
		{`{"code":3,}`, nil},
		{`{"code":1.0}`, nil},
		{`{"code":1e2}`, nil},
		{`{"code":01}`, nil},
		{`{"code":"3"}`, nil},
		{`{"code":99999999999999999999}`, nil},
		{`{"code":3,"code":4}`, nil},
		{`{"CODE":3}`, nil},
		{`{"Code":3}`, nil},
		{`{"\u212aille":1}`, nil}, // not ASCII: encoding/json's folding might match it to a field
		{`{"killed":true}`, nil},
		{`{"error":"a` + "\n" + `b"}`, nil},
		{`{"error":"\x"}`, nil},
		{`{"error":"\u12"}`, nil},
		{`{"session":{"id":"s","id":"t"}}`, nil},
		{`{"session":[]}`, nil},
		{`{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, nil},
		{`{"code":3`, nil},
		{`{"code" 3}`, nil},
		{`{"down":tru}`, &Exit{}}, // an unknown key's value is still checked: refused below
	} {
		var got Exit
		err := DecodeExit([]byte(c.in), &got)
		if c.in == `{"down":tru}` {
			if err == nil {
				t.Errorf("DecodeExit(%q) took a broken literal", c.in)
			}
			continue
		}
		switch {
		case c.want == nil && err == nil:
			t.Errorf("DecodeExit(%q) = %+v; want it refused", c.in, got)
		case c.want != nil && (err != nil || !reflect.DeepEqual(got, *c.want)):
			t.Errorf("DecodeExit(%q) = %+v, %v; want %+v", c.in, got, err, *c.want)
		}
		if err == nil {
			if ref, rerr := viaJSON[Exit](t, []byte(c.in)); rerr != nil || !reflect.DeepEqual(ref, got) {
				t.Errorf("DecodeExit(%q) = %+v; encoding/json reads %+v, %v", c.in, got, ref, rerr)
			}
		}
	}
}

// FuzzDecodeControl: what DecodeHello or DecodeExit takes, encoding/json
// reads the same; nothing makes them panic.
func FuzzDecodeControl(f *testing.F) {
	for _, s := range []string{`{"code":3,"killed":1,"error":"x","session":{"id":"a","new":true}}`,
		`{"proto":3,"build":"b","down":true,"dead_after_ms":5,"agent_since_ms":7}`,
		`{"x":[{"y":"\ud83d\ude00"}],"code":-0}`, `{"error":"\u00e9\/"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		var e Exit
		if DecodeExit(p, &e) == nil {
			if ref, err := viaJSON[Exit](t, p); err != nil || !reflect.DeepEqual(ref, e) {
				t.Fatalf("DecodeExit(%q) = %+v; encoding/json: %+v, %v", p, e, ref, err)
			}
		}
		var h Hello
		if DecodeHello(p, &h) == nil {
			if ref, err := viaJSON[Hello](t, p); err != nil || ref != h {
				t.Fatalf("DecodeHello(%q) = %+v; encoding/json: %+v, %v", p, h, ref, err)
			}
		}
	})
}

// FuzzControlRoundTrip: a Start EncodeStart writes reads as json.Marshal's
// does; an Exit and a Hello json.Marshal writes decode to themselves.
func FuzzControlRoundTrip(f *testing.F) {
	f.Add("sh", "X=a,b", "/w", "HSBX=1", "echo \"hi\"", int64(5), true, 3, "err\n")
	f.Add("\xff", "", "", "", "\u2028<&>", int64(-1), false, -1, "\x00")
	f.Fuzz(func(t *testing.T, a, env, dir, marker, script string, n int64, b bool, code int, text string) {
		st := Start{Argv: []string{a, text}, Env: []string{env}, Dir: dir, Stdin: b, Marker: marker, Script: script, SessionIdleMS: n, User: env}
		got, err := viaJSON[Start](t, EncodeStart(st))
		m, _ := json.Marshal(st)
		want, _ := viaJSON[Start](t, m)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("EncodeStart(%+v) = %s: %+v, %v; json.Marshal's reads %+v", st, EncodeStart(st), got, err, want)
		}
		e := Exit{Code: code, Killed: int(n), Error: text, NotDelivered: b, WriteFailed: a, WriteError: dir, BrokenPipe: !b}
		if b {
			e.Session = &SessionNote{ID: marker, New: b, Reset: script, Ended: env}
		}
		m, _ = json.Marshal(e)
		wantE, _ := viaJSON[Exit](t, m) // strings repaired as encoding/json repairs them
		var gotE Exit
		if err := DecodeExit(m, &gotE); err != nil || !reflect.DeepEqual(gotE, wantE) {
			t.Fatalf("DecodeExit(%s) = %+v, %v; want %+v", m, gotE, err, wantE)
		}
		h := Hello{Proto: code, Build: text, Down: b, DeadAfterMS: n, AgentSinceMS: -n}
		m, _ = json.Marshal(h)
		wantH, _ := viaJSON[Hello](t, m)
		var gotH Hello
		if err := DecodeHello(m, &gotH); err != nil || gotH != wantH {
			t.Fatalf("DecodeHello(%s) = %+v, %v; want %+v", m, gotH, err, wantH)
		}
	})
}

// fillAll sets every field of the struct v points to (and of structs it
// points to) to a value that is not zero: a field added to Start, Hello,
// Exit or SessionNote and not to their hand-written codecs fails below.
func fillAll(v reflect.Value) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x" + v.Type().Field(i).Name)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(7 + i))
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"s" + v.Type().Field(i).Name}))
		case reflect.Pointer:
			p := reflect.New(f.Type().Elem())
			fillAll(p.Elem())
			f.Set(p)
		default:
			panic("fillAll: a field of kind " + f.Kind().String() + ": teach the codec and this test")
		}
	}
}

func TestControlCodecsCoverEveryField(t *testing.T) {
	var st Start
	fillAll(reflect.ValueOf(&st).Elem())
	got, err := viaJSON[Start](t, EncodeStart(st))
	if err != nil || !reflect.DeepEqual(got, st) {
		t.Errorf("EncodeStart drops a field: %s\nreads as %+v\nwant     %+v", EncodeStart(st), got, st)
	}
	var h, gotH Hello
	fillAll(reflect.ValueOf(&h).Elem())
	m, _ := json.Marshal(h)
	if err := DecodeHello(m, &gotH); err != nil || gotH != h {
		t.Errorf("DecodeHello drops a field: %s: %+v, %v", m, gotH, err)
	}
	var e, gotE Exit
	fillAll(reflect.ValueOf(&e).Elem())
	m, _ = json.Marshal(e)
	if err := DecodeExit(m, &gotE); err != nil || !reflect.DeepEqual(gotE, e) {
		t.Errorf("DecodeExit drops a field: %s: %+v, %v", m, gotE, err)
	}
}
