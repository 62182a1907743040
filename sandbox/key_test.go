package sandbox

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/runtime/kubectl"
)

// The Hermes backend's label sanitizer tests, translated.
func TestSanitizeLabel(t *testing.T) {
	cases := map[string]string{
		"plain-name_1.0":         "plain-name_1.0",
		"with/slash":             "with_slash",
		"with:colon":             "with_colon",
		"with space":             "with_space",
		"emoji-😀-here":           "emoji-_-here",
		"":                       "unknown",
		"///":                    "___",
		strings.Repeat("a", 100): strings.Repeat("a", 63),
	}
	for in, want := range cases {
		if got := SanitizeLabel(in); got != want {
			t.Errorf("SanitizeLabel(%q) = %q, want %q", in, got, want)
		}
	}
	if got := SanitizeLabel(strings.Repeat("ü", 70)); len(got) != 63 {
		t.Errorf("multibyte input: %q (%d chars)", got, len(got))
	}
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{1,62}$`)

func TestKeysNeverCollide(t *testing.T) {
	long1 := strings.Repeat("t", 63) + "-one-" + strings.Repeat("x", 32)
	long2 := strings.Repeat("t", 63) + "-two-" + strings.Repeat("x", 32)
	pairs := [][2]Key{
		{{Profile: "default", Task: "a/b"}, {Profile: "default", Task: "a_b"}},
		{{Profile: "default", Task: long1}, {Profile: "default", Task: long2}},
		{{Profile: "a", Task: "b\x00c"}, {Profile: "a\x00b", Task: "c"}},
		{{Profile: "p", Task: ""}, {Profile: "p", Task: "unknown"}},
	}
	for _, p := range pairs {
		a, b := p[0], p[1]
		if a.Hash() == b.Hash() || a.Name() == b.Name() {
			t.Errorf("%q and %q share hash or name", a, b)
		}
		if a.Matches(b.Labels()) || b.Matches(a.Labels()) {
			t.Errorf("%q matches %q's labels", a, b)
		}
		if a.Labels()[LabelTask] == b.Labels()[LabelTask] && a.Labels()[LabelKey] == b.Labels()[LabelKey] {
			t.Errorf("labels cannot tell %q from %q", a, b)
		}
	}
}

func TestNameIsAValidContainerName(t *testing.T) {
	for _, k := range []Key{{Profile: "default", Task: "default"}, {Profile: "", Task: ""}, {Profile: "😀", Task: "///"}, {Profile: strings.Repeat("p", 200), Task: strings.Repeat("t", 200)}, {Profile: "-x-", Task: ".y."}} {
		n := k.Name()
		if !nameRE.MatchString(n) {
			t.Errorf("Name(%q) = %q is not a valid container name", k, n)
		}
		if n != k.Name() {
			t.Errorf("Name is not deterministic")
		}
	}
	if got := (Key{Profile: "default", Task: "my task"}).Name(); !strings.HasPrefix(got, "hsbx-default-my_task-") {
		t.Errorf("Name = %q", got)
	}
}

func TestHermesLabels(t *testing.T) {
	l := Key{Profile: "research-bot", Task: "task/1"}.Labels()
	if l["hermes-agent"] != "1" || l["hermes-task-id"] != "task_1" || l["hermes-profile"] != "research-bot" {
		t.Errorf("labels %v", l)
	}
	if l[LabelRawTask] != "task/1" {
		t.Errorf("raw task label %q", l[LabelRawTask])
	}
	if (Key{Profile: "x", Task: "y"}).Matches(map[string]string{"hermes-agent": "1", "hermes-task-id": "y", "hermes-profile": "x"}) {
		t.Errorf("a Hermes-made container (no hsbx.key) must not match")
	}
}

func TestNonceLabelIsTheKubectlRuntimes(t *testing.T) {
	if LabelNonce != kubectl.NonceLabel {
		t.Fatalf("sandbox.LabelNonce %q != kubectl.NonceLabel %q: the kubectl runtime deletes finished Pods by it", LabelNonce, kubectl.NonceLabel)
	}
}

// A key's names must be UTF-8: the engines turn other bytes into U+FFFD in
// labels, so the name would read back as another.
func TestKeyValidate(t *testing.T) {
	for _, tc := range []struct {
		k  Key
		ok bool
	}{
		{Key{Profile: "p", Task: "t"}, true},
		{Key{Profile: "p", Task: "ünï/cödé,=x"}, true},
		{Key{Profile: "p", Task: "k\xff"}, false},
		{Key{Profile: "p\xfe", Task: "t"}, false},
		{Key{Shared: "s\xff", Task: "t"}, false},
	} {
		err := tc.k.Validate()
		var se *SpecError
		if (err == nil) != tc.ok || (err != nil && !errors.As(err, &se)) {
			t.Errorf("%+v: %v, want ok %v (a *SpecError when not)", tc.k, err, tc.ok)
		}
	}
}
