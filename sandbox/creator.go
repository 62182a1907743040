package sandbox

import (
	"os"
	"strconv"
	"strings"
)

// A sandbox records which process created it (LabelCreator, "<boot
// id>/<pid>"). A `run` is create-then-start; a "created" container is
// another process's create in progress — unless that process is gone (a
// killed `up`). On the same host (same boot id) hsbx can tell, and
// recovers at once instead of waiting the create out. Elsewhere (another
// host, no /proc) it cannot, and waits as before.

// bootID identifies this host's current boot ("" when unknown).
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// creatorLabel is this process's LabelCreator value ("" when the host has
// no boot id).
func creatorLabel() string {
	id := bootID()
	if id == "" {
		return ""
	}
	return id + "/" + strconv.Itoa(os.Getpid())
}

// creatorGone reports whether the label names a process on this host that
// no longer runs (true), or says nothing certain (false: alive, another
// host, or unknown).
func creatorGone(label string) bool {
	boot, pidStr, ok := strings.Cut(label, "/")
	if !ok || boot == "" || boot != bootID() {
		return false
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + pidStr + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	// A zombie has exited too: "pid (comm) Z ...".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// Creator says what this host can tell about the process that made a
// sandbox (its LabelCreator value): Gone — it ran on this host (this boot)
// and no longer runs; Alive — it runs here now. Neither: another host, an
// earlier boot's process, or no label; nothing certain.
type Creator struct {
	Gone, Alive bool
}

// CreatorOf judges a LabelCreator value on this host.
func CreatorOf(label string) Creator {
	boot, pid, ok := strings.Cut(label, "/")
	if !ok || boot == "" || boot != bootID() {
		return Creator{}
	}
	if n, err := strconv.Atoi(pid); err != nil || n <= 0 {
		return Creator{}
	}
	if creatorGone(label) {
		return Creator{Gone: true}
	}
	_, err := os.Stat("/proc/" + pid)
	return Creator{Alive: err == nil}
}
