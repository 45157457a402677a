package serving

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// padFixtures holds real exported models (python/make_pad_fixtures.py):
// each as torch.onnx dynamo, torch.onnx TorchScript (output dims the file
// leaves unknown) and torch.export .pt2, with PyTorch's outputs.
const padFixtures = "../testdata/padprobe"

var padFormats = []struct{ suffix, file string }{
	{".dynamo.onnx", "model.onnx"},
	{".ts.onnx", "model.onnx"},
	{".pt2", "model.pt2"},
}

// TestPadProbePicksThePolicy serves each real exported model with no
// config.yaml: the load-time probe must find that the time dim of a mean
// over time and of a GroupNorm is not pad-safe (served at exact sizes) and
// that masked attention's is (padded into buckets, the mask padded with
// 0), and every answer at sizes that are not bucket sizes must equal
// PyTorch's.
func TestPadProbePicksThePolicy(t *testing.T) {
	r := newRepo(t)
	want := map[string]PadPolicy{"timemean": PadExact, "groupnorm": PadExact, "attention": PadBuckets}
	for name := range want {
		for _, f := range padFormats {
			data, err := os.ReadFile(filepath.Join(padFixtures, name+f.suffix))
			if err != nil {
				t.Fatal(err)
			}
			r.writeFile(name+strings.ReplaceAll(f.suffix, ".", "_"), 1, f.file, data)
		}
	}
	m, _ := start(t, r, nil)
	for name, policy := range want {
		for _, f := range padFormats {
			model := name + strings.ReplaceAll(f.suffix, ".", "_")
			t.Run(model, func(t *testing.T) {
				md, err := m.Metadata(model, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(md.Symbols) != 2 || md.Symbols[0].Role != "batch" || md.Symbols[0].Pad != string(PadBuckets) {
					t.Fatalf("symbols %+v", md.Symbols)
				}
				if tm := md.Symbols[1]; tm.Pad != string(policy) || !strings.HasPrefix(tm.PadReason, "probe: ") {
					t.Errorf("time symbol %+v, want pad %s by the probe", tm, policy)
				}
				for _, c := range []string{"b3t7", "b1t5"} {
					inputs := map[string]*tensor.Tensor{"x": readNpy(t, filepath.Join(padFixtures, name+"."+c+".in.x.npy"))}
					if name == "attention" {
						inputs["mask"] = readNpy(t, filepath.Join(padFixtures, name+"."+c+".in.mask.npy"))
					}
					resp := infer(t, m, model, 0, inputs)
					ref := readNpy(t, filepath.Join(padFixtures, name+"."+c+".out.npy"))
					assertClose(t, fmt.Sprintf("%s %s (bucket %s)", model, c, resp.Bucket), resp.Outputs[0].Tensor, ref, 1e-4)
				}
			})
		}
	}
}

// TestPT2BatchesWithoutConfig: a torch.export archive with a dynamic batch
// (torch's symbol names, minimum 2) and no config.yaml batches under
// concurrent load: a request of one row runs padded into the smallest
// allowed bucket, and batches of more than one request form.
func TestPT2BatchesWithoutConfig(t *testing.T) {
	r := newRepo(t)
	data, err := os.ReadFile(filepath.Join(padFixtures, "groupnorm.pt2"))
	if err != nil {
		t.Fatal(err)
	}
	r.writeFile("gn", 1, "model.pt2", data)
	m, _ := start(t, r, nil)
	md, err := m.Metadata("gn", 0)
	if err != nil {
		t.Fatal(err)
	}
	if b := md.Symbols[0]; b.Name != "batch" || b.Min != 1 || b.Buckets[0] != 1 || len(b.ModelSymbols) != 1 || !strings.HasPrefix(b.ModelSymbols[0], "s") {
		t.Errorf("batch symbol %+v", b)
	}
	x := readNpy(t, filepath.Join(padFixtures, "groupnorm.b3t7.in.x.npy"))
	ref := readNpy(t, filepath.Join(padFixtures, "groupnorm.b3t7.out.npy"))
	one := func(i int) (*tensor.Tensor, *tensor.Tensor) { return rows(x, i), rows(ref, i) }
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				in, want := one((g + i) % 3)
				resp, err := m.Infer(context.Background(), "gn", 0, &InferRequest{Inputs: map[string]*tensor.Tensor{"x": in}})
				if err != nil {
					t.Error(err)
					return
				}
				assertClose(t, "row", resp.Outputs[0].Tensor, want, 1e-4)
			}
		}()
	}
	wg.Wait()
	st, ok, err := m.BatchStats("gn", 0)
	if err != nil || !ok {
		t.Fatalf("gn does not batch: %v", err)
	}
	if st.Total.Completed != 128 || st.Total.Batches >= 128 {
		t.Errorf("128 requests in %d batches (%d completed): want batches of more than one", st.Total.Batches, st.Total.Completed)
	}
	if n := metric(t, m, `xserve_batch_rows_count{kind="real",model="gn",version="1"}`); n != float64(st.Total.Batches) {
		t.Errorf("xserve_batch_rows counts %v batches, the batcher %d", n, st.Total.Batches)
	}
}
