package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeConfigFile serves with --config: the file's keys set the flags
// (nested keys and plain ones), the command line wins (launchXserve's
// --http-addr 127.0.0.1:0 over the file's unusable address), and the file's
// body limit is what the server enforces. Its cpu-devices: 2 and devices:
// all (--cpu-devices 2 --devices all) place tinycnn on both host devices:
// answers match ONNX Runtime, xserve_device_executions_total counts
// executions on each and xserve_device_busy_seconds_total their time.
func TestServeConfigFile(t *testing.T) {
	config := filepath.Join(t.TempDir(), "xserve.yaml")
	text := `# the server's options; keys are serve's flags
http-addr: "no-such-address"   # the command line wins
max-body-bytes: 1MiB
nats: false
cpu-devices: 2
devices: all
log:
  level: debug
`
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startXserve(t, tinycnnRepo(t), t.TempDir(), "--config", config)
	defer p.stop(t)
	img, want := loadSample(t).batch(1)
	before := string(call(t, "GET", p.url+"/metrics", nil).body) // the load's pad probe ran too
	for range 4 {
		checkV1(t, call(t, "POST", p.url+"/v1/infer", v1Request("tinycnn", img, "float32", false)), want)
	}
	metrics := string(call(t, "GET", p.url+"/metrics", nil).body)
	for _, dev := range []string{`device="0"`, `device="1"`} {
		n := metricSum(metrics, "xserve_device_executions_total", dev) - metricSum(before, "xserve_device_executions_total", dev)
		if n != 2 {
			t.Errorf("4 requests on 2 devices: xserve_device_executions_total{%s} grew by %v, want 2:\n%s", dev, n, grepLines(metrics, "xserve_device_"))
		}
		if metricSum(metrics, "xserve_device_memory_bytes", dev) <= 0 {
			t.Errorf("xserve_device_memory_bytes{%s} is not positive:\n%s", dev, grepLines(metrics, "xserve_device_"))
		}
		// Each device ran two of the requests: it was busy for a while,
		// and has nothing in flight once they were answered.
		busy := metricSum(metrics, "xserve_device_busy_seconds_total", dev) - metricSum(before, "xserve_device_busy_seconds_total", dev)
		if busy <= 0 || metricSum(metrics, "xserve_device_executions_in_flight", dev) != 0 ||
			!strings.Contains(metrics, "xserve_device_executions_in_flight{"+dev+"} 0") {
			t.Errorf("4 requests on 2 devices: xserve_device_busy_seconds_total{%s} grew by %v, want > 0, and no execution in flight:\n%s", dev, busy, grepLines(metrics, "xserve_device_"))
		}
	}
	r := call(t, "POST", p.url+"/v1/infer", make([]byte, 2<<20))
	if r.code != 413 || !strings.Contains(r.errorMessage(), "larger than the limit of 1048576 bytes") {
		t.Errorf("a 5 KiB body with max-body-bytes: 1MiB in the file: %s", r)
	}
	log := p.log.String()
	for _, want := range []string{"NATS off", "level=DEBUG", "devices=2"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q (the file's nats: false, log.level: debug, cpu-devices: 2)", want)
		}
	}
}

// TestServeConfigErrors: a bad file stops serve before it loads anything,
// with an error naming the file, the key and its line.
func TestServeConfigErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, text, want string }{
		{"unknown key", "model-repo: x\nhttp:\n  adress: :80\n", `config %s:3: unknown key "http-adress"`},
		{"bad value", "model-repo: x\nshutdown-timeout: later\n", `config %s:2: key "shutdown-timeout": invalid value "later"`},
		{"checked like the flag", "model-repo: x\nshutdown-timeout: 0s\n", "--shutdown-timeout must be positive, got 0s"},
		{"no repository in file or flags", "http-addr: :0\n", "--model-repo DIR is required"},
		{"negative CPU devices", "model-repo: x\ncpu-devices: -1\n", "--cpu-devices must be 0 or more, got -1"},
		{"device listed twice", "model-repo: x\ndevices: [1, 1]\n", `key "devices": invalid value "1,1"`},
		{"device the client lacks", "model-repo: x\ncpu-devices: 2\ndevices: [0, 2]\n", "--devices 0,2: no device 2 (the cpu client has 2"},
		{"negative shared-memory regions", "model-repo: x\nshared-memory-regions: -1\n", "--shared-memory-regions must be 0 (off) or more, got -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if strings.Contains(want, "%s") {
				want = strings.Replace(want, "%s", path, 1)
			}
			_, _, err := xserve(t, "serve", "--config", path)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want it to contain %q", err, want)
			}
		})
	}
	if _, _, err := xserve(t, "serve", "--config", filepath.Join(dir, "none.yaml")); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("missing file: err = %v, want it named", err)
	}
}

// TestVersionListsDevices: `xserve version` counts the client's devices,
// as many as --cpu-devices asks of the CPU plugin, and lists each with its
// kind as the plugin describes it.
func TestVersionListsDevices(t *testing.T) {
	out, _, err := xserve(t, "version", "--cpu-devices", "3")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"devices: 3 cpu\n", "device 0: cpu\n", "device 1: cpu\n", "device 2: cpu\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("version --cpu-devices 3 lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "device 3:") {
		t.Errorf("version --cpu-devices 3 lists a fourth device:\n%s", out)
	}
}
