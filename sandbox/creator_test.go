package sandbox

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

func TestCreatorOf(t *testing.T) {
	self := creatorLabel()
	if self == "" {
		t.Skip("no boot id on this host")
	}
	boot := bootID()
	// A process that ran here and ended (reaped, so its pid is free).
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := boot + "/" + strconv.Itoa(cmd.Process.Pid)
	for label, want := range map[string]Creator{
		self: {Alive: true},
		dead: {Gone: true},
		"another-boot/" + strconv.Itoa(os.Getpid()): {},
		boot + "/0": {},
		boot + "/x": {},
		"":          {},
		"no-slash":  {},
	} {
		if got := CreatorOf(label); got != want {
			t.Errorf("CreatorOf(%q) = %+v, want %+v", label, got, want)
		}
	}
}
