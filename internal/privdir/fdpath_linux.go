package privdir

import "strconv"

// FDPath names the open directory through /proc/self/fd: a path under it
// resolves through the checked directory itself, whatever happens to the
// names on its path later, and stays short enough for a unix socket.
// Valid in this process only, while d is open.
func (d *Dir) FDPath() string { return "/proc/self/fd/" + strconv.Itoa(int(d.f.Fd())) }
