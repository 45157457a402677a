package main

import (
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// TestRunProtocol drives the runner as bench/peers.py does, on the real
// CPU plugin: load tinycnn for a batch of 4 (served with buckets 2 and 4),
// time it, and get an error line, not an exit, for a bad command or model.
func TestRunProtocol(t *testing.T) {
	t.Chdir("../..") // the runner finds the plugin from the repository root
	img, err := tensor.ReadNpyFile("examples/samples/tinycnn/image.npy")
	if err != nil {
		t.Fatal(err)
	}
	four := tensor.New(img.DType, append([]int64{4}, img.Shape[1:]...)...)
	copy(four.Data, img.Data)
	copy(four.Data[len(img.Data):], img.Data)
	file := filepath.Join(t.TempDir(), "four.npy")
	if err := tensor.WriteNpyFile(file, four); err != nil {
		t.Fatal(err)
	}
	for _, split := range []string{"auto", "always", "off"} {
		t.Run(split, func(t *testing.T) {
			t.Setenv("XSERVE_SPLIT_BATCHES", split)
			in := strings.Join([]string{
				"load cnn examples/models/tinycnn/1/model.onnx image=" + file,
				"time cnn 5",
				"cputime cnn 3",
				"time nothing 1",
				"load bad examples/models/tinycnn/1/model.onnx",
				"frobnicate",
				"quit",
			}, "\n") + "\n"
			var out bytes.Buffer
			if err := run(strings.NewReader(in), &out); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 6 {
				t.Fatalf("got %d lines, want 6:\n%s", len(lines), out.String())
			}
			if lines[0] != "ok" {
				t.Errorf("load: %q, want ok", lines[0])
			}
			if f := strings.Fields(lines[1]); len(f) != 5 {
				t.Errorf("time cnn 5: %q, want 5 latencies", lines[1])
			}
			var cpu int64
			for _, v := range strings.Fields(lines[2]) {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 0 {
					t.Errorf("cputime cnn 3: %q is not a CPU time in ns", v)
				}
				cpu += n
			}
			if f := strings.Fields(lines[2]); len(f) != 3 || cpu <= 0 {
				t.Errorf("cputime cnn 3: %q, want 3 CPU times, not all 0", lines[2])
			}
			for i, want := range []string{"error: no such model loaded", "error: no input file for image", `error: unknown command "frobnicate"`} {
				if lines[3+i] != want {
					t.Errorf("line %d: %q, want %q", 3+i, lines[3+i], want)
				}
			}
		})
	}
	t.Setenv("XSERVE_SPLIT_BATCHES", "sometimes")
	if err := run(strings.NewReader("quit\n"), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "XSERVE_SPLIT_BATCHES") {
		t.Errorf("XSERVE_SPLIT_BATCHES=sometimes: %v, want an error naming the variable", err)
	}
}
