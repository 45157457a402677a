package serving

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xserve/xserve/batching"
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

// TestPadProbeSeesStridedPooling serves a real torch.onnx CNN (two
// stride-2 convolutions, then a global average pool over height and width;
// the form of PaddleOCR's text-direction classifier) with no config.yaml.
// Padding a size by one row is invisible to it (the convolutions' own zero
// padding covers the row), padding by a realistic amount is not: the probe
// must serve height and width at exact sizes, and answers at [3,3,48,192]
// (which would pad into 64x256) and [1,3,20,7] must equal ONNX Runtime's.
func TestPadProbeSeesStridedPooling(t *testing.T) {
	r := newRepo(t)
	data, err := os.ReadFile(filepath.Join(padFixtures, "stridedpool.ts.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	r.writeFile("stridedpool", 1, "model.onnx", data)
	m, _ := start(t, r, nil)
	md, err := m.Metadata("stridedpool", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]PadPolicy{"batch": PadBuckets, "height": PadExact, "width": PadExact}
	if len(md.Symbols) != len(want) {
		t.Fatalf("symbols %+v", md.Symbols)
	}
	for _, s := range md.Symbols {
		if s.Pad != string(want[s.Name]) || !strings.HasPrefix(s.PadReason, "probe: ") {
			t.Errorf("symbol %+v, want pad %s by the probe", s, want[s.Name])
		}
	}
	for _, c := range []string{"3x3x48x192", "1x3x20x7"} {
		inputs := map[string]*tensor.Tensor{"x": readNpy(t, filepath.Join(padFixtures, "stridedpool."+c+".in.x.npy"))}
		resp := infer(t, m, "stridedpool", 0, inputs)
		ref := readNpy(t, filepath.Join(padFixtures, "stridedpool."+c+".out.npy"))
		assertClose(t, fmt.Sprintf("stridedpool %s (bucket %s)", c, resp.Bucket), resp.Outputs[0].Tensor, ref, 1e-4)
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
	// Each batch takes a little longer than this tiny model's execution, as
	// a real model's would, so that requests arriving meanwhile form the
	// next batch.
	m.batchHook = func(context.Context, *batching.Batch) { time.Sleep(2 * time.Millisecond) }
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

// TestExactSizesLRU: a symbol served at exact sizes gets one executable
// per distinct size, at most exact_executables of them, least recently
// used out first (and compiled again when its size comes back).
func TestExactSizesLRU(t *testing.T) {
	r := newRepo(t)
	r.add("pair", 1, pairModel)
	r.config("pair", "buckets:\n  batch: [4]\n  seq: [8]\npad:\n  batch: true\n  seq: false\nexact_executables: 2\n")
	m, _ := start(t, r, nil)
	x, y := readNpy(t, "testdata/pair_x.npy"), readNpy(t, "testdata/pair_y.npy") // [3,5]
	sum := readNpy(t, "testdata/pair_sum.onnxruntime.npy")
	for _, n := range []int64{3, 5, 2, 4, 3} {
		resp := infer(t, m, "pair", 0, map[string]*tensor.Tensor{"x": cutCols(x, n), "y": cutCols(y, n)})
		if want := fmt.Sprintf("batch=4,seq=%d", n); resp.Bucket != want {
			t.Errorf("seq %d ran in %s, want %s", n, resp.Bucket, want)
		}
		assertClose(t, fmt.Sprintf("sum at seq %d", n), resp.Outputs[0].Tensor, cutCols(sum, n), 1e-6)
	}
	if n := metric(t, m, `xserve_exact_executables{model="pair",version="1"}`); n != 2 {
		t.Errorf("exact executables %v, want 2", n)
	}
	if n := metric(t, m, `xserve_exact_evictions_total{model="pair",version="1"}`); n != 3 {
		t.Errorf("evictions %v, want 3 (5 requests, 4 sizes, 2 kept)", n)
	}
	if n := compilations(t, m, "pair", "1", "batch=4,seq=3"); n != 2 {
		t.Errorf("seq 3 compiled %v times, want 2 (evicted in between)", n)
	}
}

// cutCols keeps the first n columns of a [rows, cols] tensor.
func cutCols(x *tensor.Tensor, n int64) *tensor.Tensor {
	out := tensor.New(x.DType, x.Shape[0], n)
	copyBlock(out.Data, out.Shape, []int64{0, 0}, x.Data, x.Shape, []int64{0, 0}, out.Shape, int64(x.DType.Size()))
	return out
}
