package cli

import (
	"strings"
	"testing"
)

// A task or profile name that is not UTF-8 got two sandboxes: `up --task
// $(printf 'k\xff')` made one, exec ran in another (the engines turn the
// byte into U+FFFD in labels, so the name read back as another), and down
// left the second running. Such names are refused, exit 2, before any
// engine call — on the fakes and every real engine.
func TestNamesThatAreNotUTF8AreRefusedRealEngines(t *testing.T) {
	for _, tg := range cliTargets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			for _, args := range [][]string{
				{"up", "--task", "k\xff"},
				{"exec", "--task", "j\xff\xfe", "--", "true"},
				{"--profile", "p\xff", "ls"},
				{"run", "--task", "k\xff", "--", "true"},
				{"cp", "--task", "k\xff", "-", ":/tmp"},
			} {
				code, out, errOut := runMain(t, append(tg.environ, "HSBX_LOG_LEVEL=debug"), args...)
				if code != ExitUsage || !strings.Contains(errOut, "is not valid UTF-8") || strings.Contains(errOut, "engine call") {
					t.Errorf("%q: exit %d, stdout %q, stderr %s (want 2, refused before any engine call)", args, code, out, errOut)
				}
			}
			if code, _, errOut := runMain(t, append(tg.environ, "HSBX_TASK=k\xff"), "exec", "--", "true"); code != ExitUsage || !strings.Contains(errOut, "HSBX_TASK") || !strings.Contains(errOut, "is not valid UTF-8") {
				t.Errorf("HSBX_TASK not UTF-8: exit %d, stderr %s", code, errOut)
			}
			if code, out, errOut := runMain(t, tg.environ, "--json", "ls", "--all-profiles"); code != 0 || strings.Contains(out, `\ufffd`) || strings.Contains(out, "\uFFFD") {
				t.Errorf("ls after the refusals: exit %d %s %s", code, out, errOut)
			}
		})
	}
}
