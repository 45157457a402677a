package serving

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/pjrt/pjrttest"
	"github.com/xserve/xserve/tensor"
)

// TestModelsPlacedOnDevices serves tinycnn three times on a CPU client with
// two host devices (the plugin's cpu_device_count): without devices: in
// config.yaml on device 0, with devices: [1] on device 1 (its weights there
// as the plugin reports, its answers ONNX Runtime's), and with devices: [2]
// not at all, its reason naming the device.
func TestModelsPlacedOnDevices(t *testing.T) {
	client := twoDeviceClient(t)
	r := newRepo(t)
	for _, name := range []string{"first", "second", "third"} {
		r.add(name, 1, tinyCNN)
	}
	r.config("second", "devices: [1]\n")
	r.config("third", "devices: [2]\n")
	m, _ := start(t, r, func(o *Options) { o.Client = client })
	image, ref := readNpy(t, tinyCNNImage), readNpy(t, tinyCNNProbs)
	for name, dev := range map[string]int{"first": 0, "second": 1} {
		resp := infer(t, m, name, 1, map[string]*tensor.Tensor{"image": image})
		assertClose(t, name, resp.Outputs[0].Tensor, ref, 1e-5)
		model := versionOf(m, name, 1).model
		if model.Device() != dev {
			t.Errorf("%s is on device %d, want %d", name, model.Device(), dev)
		}
		if model.Weights().Len() == 0 {
			t.Fatalf("%s has no weights on the device", name)
		}
	}
	if st, reason := state(m, "third", 1); st != StateUnavailable || !strings.Contains(reason, "no device 2 to place the model on (the cpu client has 2)") {
		t.Errorf("third (devices: [2] of 2): %s %q", st, reason)
	}
}

// TestModelOnEveryDevice serves tinycnn on both devices of a CPU client
// with two host devices (Options.Devices [0 1], as --devices all): every
// answer is ONNX Runtime's, each device's placement has its weights there,
// and xserve_device_executions_total counts executions on both devices,
// sequential requests alternating, with one compile per bucket.
// xserve_device_memory_bytes shows the weights on each device.
func TestModelOnEveryDevice(t *testing.T) {
	client := twoDeviceClient(t)
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	m, _ := start(t, r, func(o *Options) { o.Client, o.Devices = client, []int{0, 1} })
	image, ref := readNpy(t, tinyCNNImage), readNpy(t, tinyCNNProbs)
	execs := func(dev string) float64 {
		return metric(t, m, `xserve_device_executions_total{device="`+dev+`"}`)
	}
	busy := func(dev string) float64 {
		return metric(t, m, `xserve_device_busy_seconds_total{device="`+dev+`"}`)
	}
	computeSum := func() float64 {
		return metric(t, m, `xserve_request_duration_seconds_sum{model="tinycnn",phase="compute",version="1"}`)
	}
	base0, base1 := execs("0"), execs("1") // the load's pad probe
	busy0, busy1, compute0 := busy("0"), busy("1"), computeSum()
	began := time.Now()
	for i := range 4 {
		resp := infer(t, m, "tinycnn", 1, map[string]*tensor.Tensor{"image": image})
		assertClose(t, fmt.Sprintf("request %d", i), resp.Outputs[0].Tensor, ref, 1e-5)
	}
	wall := time.Since(began).Seconds()
	if e0, e1 := execs("0")-base0, execs("1")-base1; e0 != 2 || e1 != 2 {
		t.Errorf("4 sequential requests: executions on device 0: %v, device 1: %v; want 2 and 2", e0, e1)
	}
	// One execution at a time: each device was busy while its two ran
	// (the busy span holds each request's compute span) and the two
	// devices' busy times do not overlap, so they add up to less than the
	// wall time of the requests.
	b0, b1, compute := busy("0")-busy0, busy("1")-busy1, computeSum()-compute0
	t.Logf("4 sequential requests in %.6fs, %.6fs of compute: busy on device 0 %.6fs, device 1 %.6fs", wall, compute, b0, b1)
	if compute <= 0 || b0 <= 0 || b1 <= 0 || b0+b1 < compute || b0+b1 > wall {
		t.Errorf("4 sequential requests in %.6fs, %.6fs of compute: busy on device 0 %.6fs, device 1 %.6fs; want each > 0, together between the compute and the wall time",
			wall, compute, b0, b1)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := infer(t, m, "tinycnn", 1, map[string]*tensor.Tensor{"image": image})
			assertClose(t, fmt.Sprintf("concurrent request %d", i), resp.Outputs[0].Tensor, ref, 1e-5)
		}()
	}
	wg.Wait()
	// Batching may join the concurrent requests into fewer executions.
	if e0, e1 := execs("0")-base0, execs("1")-base1; e0 < 2 || e1 < 2 || e0+e1 < 5 {
		t.Errorf("after 8 more requests at once: executions on device 0: %v, device 1: %v; want more than 4 in all", e0, e1)
	}
	for _, dev := range []string{"0", "1"} {
		if n := metric(t, m, `xserve_device_executions_in_flight{device="`+dev+`"}`); n != 0 {
			t.Errorf("xserve_device_executions_in_flight{device=%s} = %v once every request was answered, want 0", dev, n)
		}
	}
	v := versionOf(m, "tinycnn", 1)
	if len(v.models) != 2 {
		t.Fatalf("%d placements, want 2", len(v.models))
	}
	// One compile per bucket, whatever the devices: the second device's
	// executable is the first's bound to its weights.
	compiled := 0.0
	for _, line := range strings.Split(metricsText(t, m), "\n") {
		if strings.HasPrefix(line, "xserve_compilations_total{") {
			f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			compiled += f
		}
	}
	v.bmu.Lock()
	buckets := len(v.buckets)
	v.bmu.Unlock()
	if compiled != float64(buckets) {
		t.Errorf("%v compilations for %d buckets on 2 devices, want one each", compiled, buckets)
	}
	for p, pm := range v.models {
		if pm.Device() != p || pm.Weights().Len() == 0 {
			t.Fatalf("placement %d: on device %d with %d weights", p, pm.Device(), pm.Weights().Len())
		}
		if got := metric(t, m, fmt.Sprintf(`xserve_device_memory_bytes{device="%d"}`, p)); got != float64(pm.Weights().Bytes()) || got == 0 {
			t.Errorf("xserve_device_memory_bytes{device=%d} = %v, its weights take %d bytes", p, got, pm.Weights().Bytes())
		}
	}
}

// TestDeviceMemoryBudget loads two tinycnn models on both devices under a
// budget on device 1 that holds one of them: one is READY, the other is
// refused with a reason naming the device, the sizes and the flag, and
// the first still answers as ONNX Runtime.
func TestDeviceMemoryBudget(t *testing.T) {
	client := twoDeviceClient(t)
	fi, err := os.Stat(tinyCNN)
	if err != nil {
		t.Fatal(err)
	}
	r := newRepo(t)
	r.add("a", 1, tinyCNN)
	r.add("b", 1, tinyCNN)
	r.config("a", "devices: [0, 1]\n")
	r.config("b", "devices: [0, 1]\n")
	m, _ := start(t, r, func(o *Options) {
		o.Client = client
		o.MemoryBudget = MemoryBudget{Devices: map[int]int64{1: fi.Size() * 3 / 2}}
	})
	ready, refused := "a", "b"
	if st, _ := state(m, "a", 1); st != StateReady {
		ready, refused = "b", "a"
	}
	if st, reason := state(m, ready, 1); st != StateReady {
		t.Fatalf("%s: %s %q, want one of the two READY", ready, st, reason)
	}
	want := fmt.Sprintf("model %s version 1 does not fit on device 1: its model files take %d bytes", refused, fi.Size())
	if st, reason := state(m, refused, 1); st != StateUnavailable || !strings.Contains(reason, want) || !strings.Contains(reason, "--model-memory-budget") {
		t.Errorf("%s: %s %q, want UNAVAILABLE: %q", refused, st, reason, want)
	}
	image, ref := readNpy(t, tinyCNNImage), readNpy(t, tinyCNNProbs)
	resp := infer(t, m, ready, 1, map[string]*tensor.Tensor{"image": image})
	assertClose(t, ready, resp.Outputs[0].Tensor, ref, 1e-5)
}

// twoDeviceClient opens the CPU plugin with two host devices.
func twoDeviceClient(t *testing.T) *pjrt.Client {
	t.Helper()
	return pjrttest.Open(t, "..", pjrt.OpenOptions{CPUDevices: 2})
}
