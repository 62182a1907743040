package enginecli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/hsbx/hsbx/runtime/docker"
	"github.com/hsbx/hsbx/runtime/enginecli"
	"github.com/hsbx/hsbx/runtime/podman"
)

// thousand repeats one captured entry 1000 times with distinct IDs.
func thousandDockerPS(b *testing.B) []byte {
	line, err := os.ReadFile("../../testdata/engines/docker-client28.2.2-engine20.10.24/ps_label.stdout")
	if err != nil {
		b.Fatal(err)
	}
	one := strings.SplitN(strings.TrimSpace(string(line)), "\n", 2)[0]
	var buf bytes.Buffer
	for i := range 1000 {
		buf.WriteString(strings.Replace(one, `"ID":"`, fmt.Sprintf(`"ID":"%04d`, i), 1) + "\n")
	}
	return buf.Bytes()
}

func thousandJSONArray(b *testing.B, path string) []byte {
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(raw, &arr); err != nil || len(arr) == 0 {
		b.Fatalf("%s: %v", path, err)
	}
	items := make([][]byte, 1000)
	for i := range items {
		items[i] = arr[i%len(arr)]
	}
	return append(append([]byte("["), bytes.Join(items, []byte(","))...), ']')
}

func BenchmarkDockerParsePS1000(b *testing.B) {
	in := thousandDockerPS(b)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := (docker.Dialect{}).ParsePS(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPodmanParsePS1000(b *testing.B) {
	in := thousandJSONArray(b, "../../testdata/engines/podman-4.3.1/ps_all.stdout")
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := (podman.Dialect{}).ParsePS(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseInspect1000(b *testing.B) {
	in := thousandJSONArray(b, "../../testdata/engines/podman-4.3.1/inspect_all.stdout")
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := enginecli.ParseInspect(in); err != nil {
			b.Fatal(err)
		}
	}
}
