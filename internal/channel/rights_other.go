//go:build !unix

package channel

import "os"

// Without SCM_RIGHTS no descriptor is passed: the holder relays output in
// frames (sendStart sends the Start alone).
const canPassFiles = false

func rightsSpace(int) int { return 0 }

func parseRights([]byte) []*os.File { return nil }

func unixRights(...int) []byte { return nil }
