//go:build !linux

package privdir

// FDPath is the directory's checked path: only Linux names an open
// directory by a path (/proc/self/fd). Every directory above it was
// checked to be changeable by no other user, so the path stays put.
func (d *Dir) FDPath() string { return d.path }
