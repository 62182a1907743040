package filelock

import (
	"path/filepath"
	"testing"
)

func TestSharedBlocksExclusive(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "x.lock")
	r1, err := Shared(p)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Shared(p) // shared locks coexist
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := TryExclusive(p); ok || err != nil {
		t.Fatalf("exclusive taken while shared are held: %v %v", ok, err)
	}
	r1()
	if _, ok, _ := TryExclusive(p); ok {
		t.Fatal("exclusive taken while one shared is held")
	}
	r2()
	rel, ok, err := TryExclusive(p)
	if !ok || err != nil {
		t.Fatalf("exclusive after release: %v %v", ok, err)
	}
	if _, ok, _ := TryExclusive(p); ok {
		t.Fatal("two exclusive holders")
	}
	rel()
	rel, err = Exclusive(p)
	if err != nil {
		t.Fatal(err)
	}
	rel()
}
