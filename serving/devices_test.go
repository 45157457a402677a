package serving

import (
	"strings"
	"testing"

	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// TestModelsPlacedOnDevices serves tinycnn three times on a CPU client with
// two host devices (the plugin's cpu_device_count): without devices: in
// config.yaml on device 0, with devices: [1] on device 1 (its weights there
// as the plugin reports, its answers ONNX Runtime's), and with devices: [2]
// not at all, its reason naming the device.
func TestModelsPlacedOnDevices(t *testing.T) {
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: ".."})
	if err != nil {
		t.Fatal(err)
	}
	client, err := pjrt.OpenWith(path, pjrt.OpenOptions{CPUDevices: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
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
