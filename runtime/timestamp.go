package runtime

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// zeroUnix is Go's zero time.Time in unix seconds, which podman prints for
// "never" (ExitedAt of a container that has not exited).
const zeroUnix = -62135596800

// ParseTime parses a timestamp in any form the engines print:
//
//   - RFC 3339 with 0 to 9 fractional digits ("2026-11-22T06:05:03.297767106Z")
//   - Go's time.String layout ("2026-11-22 06:04:34.577754154 +0000 UTC",
//     with or without fraction, zone name and monotonic " m=+1.2" suffix)
//   - unix seconds, integer or fractional ("1795328736")
//
// The zero values ("0001-01-01T00:00:00Z", -62135596800, 0) mean "never" and
// parse to the zero time.Time with a nil error. An empty string is "never"
// too. Anything else is an error, so callers can tell "never" from "garbage".
func ParseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if i := strings.Index(s, " m="); i > 0 { // monotonic clock reading from time.String
		s = s[:i]
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return never(t), nil
	}
	for _, layout := range goStringLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return never(t), nil
		}
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return UnixTime(f)
	}
	return time.Time{}, fmt.Errorf("unrecognised timestamp %q", s)
}

var goStringLayouts = []string{
	"2006-01-02 15:04:05.999999999 -0700 MST",
	"2006-01-02 15:04:05.999999999 -0700",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999 -0700 MST",
}

// UnixTime converts unix seconds as podman prints them; zero and negative
// values (podman's -62135596800 among them) mean "never".
func UnixTime(sec float64) (time.Time, error) {
	switch {
	case sec != sec: // NaN
		return time.Time{}, errors.New("unrecognised timestamp NaN")
	case sec <= 0:
		return time.Time{}, nil
	case sec > 1e12: // beyond year 33658: not a time an engine prints
		return time.Time{}, fmt.Errorf("unrecognised timestamp %v", sec)
	}
	whole := int64(sec)
	return time.Unix(whole, int64((sec-float64(whole))*1e9)).UTC(), nil
}

// never maps Go's zero time (year 1) and the unix epoch to time.Time{}.
func never(t time.Time) time.Time {
	if t.Year() <= 1 || t.Unix() == 0 || t.Unix() == zeroUnix {
		return time.Time{}
	}
	return t.UTC()
}
