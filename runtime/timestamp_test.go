package runtime_test

import (
	"testing"
	"time"

	"github.com/hsbx/hsbx/runtime"
)

func TestParseTime(t *testing.T) {
	ns := time.Date(2026, 11, 22, 6, 5, 3, 297767106, time.UTC)
	cases := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"2026-11-22T06:05:03.297767106Z", ns, false}, // docker/podman inspect
		{"2026-11-22T06:05:03.297767Z", ns.Truncate(time.Microsecond), false},
		{"2026-11-22T06:05:03Z", ns.Truncate(time.Second), false},
		{"2026-11-22T07:05:03.297767106+01:00", ns, false},
		{"2026-11-22 06:05:03.297767106 +0000 UTC", ns, false},             // podman --format '{{.State.FinishedAt}}'
		{"2026-11-22 06:05:03 +0000 UTC", ns.Truncate(time.Second), false}, // docker ps CreatedAt
		{"2026-11-22 06:05:03.297767106 +0000 UTC m=+12.5", ns, false},
		{"1795327503", time.Unix(1795327503, 0).UTC(), false}, // podman ps
		{"0001-01-01T00:00:00Z", time.Time{}, false},          // never
		{"0001-01-01 00:00:00 +0000 UTC", time.Time{}, false},
		{"-62135596800", time.Time{}, false},
		{"0", time.Time{}, false},
		{"", time.Time{}, false},
		{"yesterday", time.Time{}, true},
		{"2026-13-45T99:00:00Z", time.Time{}, true},
		{"1e300", time.Time{}, true},
	}
	for _, tc := range cases {
		got, err := runtime.ParseTime(tc.in)
		if (err != nil) != tc.wantErr || !got.Equal(tc.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v, err %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestStateAlive(t *testing.T) {
	for s, alive := range map[runtime.State]bool{
		runtime.StateRunning: true, runtime.StatePaused: true, runtime.StateRestarting: true,
		runtime.StateUnknown: true, runtime.StateStopping: true, runtime.StateRemoving: true,
		runtime.StateExited: false, runtime.StateCreated: false, runtime.StateDead: false,
	} {
		if s.Alive() != alive {
			t.Errorf("%s.Alive() = %v", s, !alive)
		}
	}
}
