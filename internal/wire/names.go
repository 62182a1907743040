package wire

// The names a session may have: the session frames carry them.

// ValidSessionName says whether name can name a session: 1 to 64 of
// [A-Za-z0-9._-], not starting with a dot.
func ValidSessionName(name string) bool {
	if name == "" || len(name) > 64 || name[0] == '.' {
		return false
	}
	for _, c := range name {
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}
