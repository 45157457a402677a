package realmodels

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/xserve/xserve/harness/zoo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/runner"
	"github.com/xserve/xserve/tensor"
)

// caseDirs lists the small real-model cases, each a directory with the
// model, in.<k>.<input>.npy and ref.<k>.<output>.npy (ONNX Runtime's
// outputs, at a batch and sequence length other than the export example's):
//   - testdata/realmodels: Hugging Face BERT, Llama and ConvNeXt at toy size,
//     from both torch ONNX exporters (python/realmodels/generate.py --tiny);
//     the dynamo exports compute position ids with Shape -> Gather -> Range;
//   - .cache/realmodels-small: trained models from PyPI wheels (PaddleOCR's
//     text-direction classifier from rapidocr-onnxruntime, two Silero VAD
//     variants from silero-vad, one whose decoder branches on Shape(x)[k] == 1,
//     which imports deferred to concrete sizes), and the wheel's default
//     silero_vad.onnx, whose 8 kHz branch (an If on the sr input) cannot be
//     built at 16 kHz sizes and is guarded; two dynamically quantized
//     BiLSTM diacritizers from text2tashkeel (DynamicQuantizeLSTM,
//     DynamicQuantizeLinear, MatMulInteger: ONNX Runtime's one-thread
//     arithmetic to the last bit) and g2p-id-py's Keras LSTM decoder, which
//     carries its state in and out; made by `make realmodels-small`.
var caseDirs = []struct {
	root  string
	cases []string
	make  string
}{
	{"../../testdata/realmodels", []string{
		"hf_bert.onnx-dynamo", "hf_bert.onnx-torchscript", "hf_llama.onnx-dynamo", "hf_llama.onnx-torchscript",
		"hf_convnext.onnx-dynamo", "hf_convnext.onnx-torchscript", "hf_convnext.onnx-quant-dynamic",
	}, "make realmodels-fixtures"},
	{"../../.cache/realmodels-small/cases", []string{
		"rapidocr_cls_v2.onnx-package", "silero_vad_16k_sequence.onnx-package", "silero_vad_16k_op15.onnx-package",
		"silero_vad.onnx-package", "text2tashkeel_bilstm_int8.onnx-package", "text2tashkeel_rawi_v3_int8.onnx-package",
		"g2p_id_lstm_decoder.onnx-package",
	}, "make realmodels-small"},
}

// tolerance is the largest max abs error output allows for case name. The
// dynamically quantized models compute ONNX Runtime's own arithmetic
// (its quantization, MLAS's tanh and logistic) to the last bit: a value
// one quantization step off (text2tashkeel bilstm's logits 3.9e-3 off
// when ONNX Tanh was XLA's tanh) must fail, so they get 1e-5 + 1e-5 *
// max|ref| (their error is within a few float32 ulps).
func tolerance(name string, maxRef float64) float64 {
	if strings.Contains(name, "_int8") || strings.Contains(name, "quant") {
		return 1e-5 + 1e-5*maxRef
	}
	return 1e-3 + 1e-3*maxRef
}

// numbered returns dir's files named prefix.<k>.*.npy in k order.
func numbered(t *testing.T, dir, prefix string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, prefix+".*.npy"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no %s.<k>.*.npy files (%v)", dir, prefix, err)
	}
	key := func(f string) string {
		k := strings.Split(filepath.Base(f), ".")[1]
		return strings.Repeat("0", 4-len(k)) + k
	}
	sort.Slice(files, func(i, j int) bool { return key(files[i]) < key(files[j]) })
	return files
}

// TestRealModelsMatchONNXRuntime imports, lowers, compiles and runs every
// small real model (runner, as xserve run does) and compares each output
// with ONNX Runtime's.
func TestRealModelsMatchONNXRuntime(t *testing.T) {
	r := newRunner(t)
	for _, set := range caseDirs {
		for _, name := range set.cases {
			t.Run(name, func(t *testing.T) {
				dir := filepath.Join(set.root, name)
				m, inputs := loadCase(t, r, dir, set.make)
				got, prog, _, err := m.Run(context.Background(), inputs)
				if err != nil {
					t.Fatal(err)
				}
				refs := numbered(t, dir, "ref")
				if len(got) != len(refs) {
					t.Fatalf("%d outputs, ONNX Runtime gave %d", len(got), len(refs))
				}
				for i, f := range refs {
					want, err := tensor.ReadNpyFile(f)
					if err != nil {
						t.Fatal(err)
					}
					d, maxRef, err := zoo.MaxAbsError(got[i], want)
					if err != nil {
						t.Fatalf("output %d (%s): %v", i, filepath.Base(f), err)
					}
					t.Logf("output %d (%s): max abs error %.3g, max |ref| %.3g", i, filepath.Base(f), d, maxRef)
					if tol := tolerance(name, maxRef); !(d <= tol) {
						t.Errorf("output %d (%s): max abs error %.3g > %.3g (dims %v)", i, filepath.Base(f), d, tol, prog.Dims)
					}
				}
			})
		}
	}
}

// newRunner returns a runner on the PJRT plugin make pjrt installs.
func newRunner(t testing.TB) *runner.Runner {
	t.Helper()
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: "../.."})
	if err != nil {
		t.Fatalf("no PJRT plugin (run make pjrt): %v", err)
	}
	c, err := pjrt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r, err := runner.New(c, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// loadCase loads dir's model.onnx and its inputs in.<k>.*.npy; mk is the
// make target that writes dir.
func loadCase(t *testing.T, r *runner.Runner, dir, mk string) (*runner.Model, []*tensor.Tensor) {
	t.Helper()
	model := filepath.Join(dir, "model.onnx")
	if _, err := os.Stat(model); err != nil {
		t.Fatalf("%v (run %s)", err, mk)
	}
	m, err := r.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	var inputs []*tensor.Tensor
	for _, f := range numbered(t, dir, "in") {
		x, err := tensor.ReadNpyFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, x)
	}
	return m, inputs
}

// TestGuardedBranchFailsLikeONNXRuntime: silero-vad's default model branches
// on its sr input (If sr == 16000); at 512 samples its 8 kHz branch cannot
// be built (its LSTM would get a rank-5 input), so the program holds the
// 16 kHz branch and a guard. 16 kHz input matches ONNX Runtime
// (TestRealModelsMatchONNXRuntime); 8 kHz input at these sizes fails, as it
// fails in ONNX Runtime ("Input X must have 3 dimensions only"), with an
// error naming the If node and the failed operator, never a result.
func TestGuardedBranchFailsLikeONNXRuntime(t *testing.T) {
	m, inputs := loadCase(t, newRunner(t), "../../.cache/realmodels-small/cases/silero_vad.onnx-package", "make realmodels-small")
	sr := inputs[2].Clone()
	sr.SetInt64(0, 8000)
	_, _, _, err := m.Run(context.Background(), []*tensor.Tensor{inputs[0], inputs[1], sr})
	if err == nil {
		t.Fatal("sr=8000 at 512 samples ran; ONNX Runtime fails it (LSTM of a rank-5 input)")
	}
	for _, want := range []string{`If node "If_0"`, "else_branch", "LSTM"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, _, _, err := m.Run(context.Background(), inputs); err != nil {
		t.Fatalf("sr=16000 after the refused run: %v", err)
	}
}
