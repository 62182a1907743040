package keystate

import (
	"testing"
	"time"
)

// A command's hold makes the sandbox not idle to another taker; released,
// it is idle again. A use is recorded and read back.
func TestHoldAndIdle(t *testing.T) {
	dir := t.TempDir()
	if _, ok := LastUse(dir, "k"); ok {
		t.Fatal("a use recorded before any")
	}
	before := time.Now().Add(-time.Second)
	Touch(dir, "k")
	if at, ok := LastUse(dir, "k"); !ok || at.Before(before) {
		t.Fatalf("last use %v %v", at, ok)
	}
	release := Hold(dir, "k")
	if _, ok := LockIdle(dir, "k"); ok {
		t.Fatal("idle while a command holds it")
	}
	if _, ok, err := TryIdle(dir, "k"); ok || err != nil {
		t.Fatalf("TryIdle while held: %v %v", ok, err)
	}
	release()
	r, ok := LockIdle(dir, "k")
	if !ok {
		t.Fatal("not idle once released")
	}
	r()
	if h := Hold("", "k"); h == nil {
		t.Fatal("no state dir: a no-op release, not nil")
	}
}
