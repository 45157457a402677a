package lower_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// BenchmarkTraceOnce measures what compiling once buys: for a ResNet-shaped
// CNN and a transformer block it reports (a) lower+compile time, (b) the
// execute time of the cached executable (ns/op), (c) the per-call time when
// lowering and compiling on every call, the ratio (c)/(b), and ONNX
// Runtime's time on the same model and input, measured in the same run.
//
// Run it with `make bench` (which generates the models into .cache/bench).
func BenchmarkTraceOnce(b *testing.B) {
	dir := os.Getenv("XSERVE_BENCH_MODELS")
	if dir == "" {
		b.Fatal("XSERVE_BENCH_MODELS is not set: run `make bench`")
	}
	client := benchClient(b)
	defer client.Close()
	for _, m := range []struct{ name, input string }{{"cnn", "image"}, {"transformer", "x"}} {
		b.Run(m.name, func(b *testing.B) {
			benchTraceOnce(b, client, filepath.Join(dir, m.name+".onnx"), m.input, filepath.Join(dir, m.name+"."+m.input+".npy"))
		})
	}
}

func benchTraceOnce(b *testing.B, client *pjrt.Client, model, inputName, inputFile string) {
	ctx := context.Background()
	g, inputs, dims := loadBenchModel(b, model, inputFile)
	l := lower.New(lower.Options{Platform: client.Platform()}, cpu.Platform())
	w := engine.NewWeights(client)
	defer w.Close()

	// (a) lower + compile, and (c) lower + compile + execute, median of 3.
	lowerCompile := func() *engine.Executable {
		prog, err := l.Lower(g, dims)
		if err != nil {
			b.Fatal(err)
		}
		exe, err := engine.Compile(ctx, client, prog, w)
		if err != nil {
			b.Fatal(err)
		}
		return exe
	}
	var compileTimes, retraceTimes []time.Duration
	for i := 0; i < 3; i++ {
		start := time.Now()
		exe := lowerCompile()
		compileTimes = append(compileTimes, time.Since(start))
		exe.Close()
		start = time.Now()
		exe = lowerCompile()
		if _, err := exe.Run(ctx, inputs); err != nil {
			b.Fatal(err)
		}
		retraceTimes = append(retraceTimes, time.Since(start))
		exe.Close()
	}

	// (b) the cached executable.
	exe := lowerCompile()
	defer exe.Close()
	for i := 0; i < 3; i++ { // warm up
		if _, err := exe.Run(ctx, inputs); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := exe.Run(ctx, inputs); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	execMs := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 1e6

	retraceMs := ms(median(retraceTimes))
	b.ReportMetric(ms(median(compileTimes)), "lower+compile-ms")
	b.ReportMetric(execMs, "execute-ms")
	b.ReportMetric(retraceMs, "retrace-ms/call")
	b.ReportMetric(retraceMs/execMs, "retrace/execute")
	if ort, ok := ortMs(b, model, inputName+"="+inputFile); ok {
		b.ReportMetric(ort, "onnxruntime-ms")
		b.ReportMetric(execMs/ort, "xla/onnxruntime")
	}
}

// ortMs times ONNX Runtime through python/ort_bench.py in the project venv.
func ortMs(b *testing.B, model string, inputs ...string) (float64, bool) {
	py := os.Getenv("XSERVE_PYTHON")
	if py == "" {
		b.Log("XSERVE_PYTHON not set: ONNX Runtime not measured (run `make bench`)")
		return 0, false
	}
	args := append([]string{"../python/ort_bench.py", model}, inputs...)
	out, err := exec.Command(py, args...).Output()
	if err != nil {
		b.Fatalf("ort_bench.py: %v", err)
	}
	var res struct {
		Median float64 `json:"median_ms"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		b.Fatalf("ort_bench.py printed %q: %v", out, err)
	}
	return res.Median, true
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// BenchmarkCPUConvOptions measures what each CPU convolution option of
// lower.Options buys: per model and option, the program compiled with the
// defaults and with that one option off, run interleaved call by call in
// the same run (each side reports the median of its calls). Options: ConvWeightsHWIO ("hwio": weights stored in XLA
// CPU's order instead of being relaid out on every call),
// DepthwiseMulAdd ("depthwise": depthwise convolutions as fused multiply-adds
// instead of XLA's dense expansion of grouped convolutions) and ConvAsDot
// ("asdot": one-group convolutions as one matrix product over im2col patches
// instead of XLA's convolution). XSERVE_CONV_OPTIONS=asdot,... runs only
// those; XSERVE_ZOO_MODELS=resnet18,... only those zoo models. It runs the cnn
// bench model and, with XSERVE_ZOO set to a `make zoo` directory, the zoo's
// resnet18, resnet50, mobilenet_v2 and mnasnet1_0 on their batch-1 inputs.
//
//	XSERVE_BENCH_MODELS=$PWD/.cache/bench XSERVE_ZOO=$PWD/zoo go test -run '^$' -bench CPUConvOptions -benchtime 40x ./lower
func BenchmarkCPUConvOptions(b *testing.B) {
	dir := os.Getenv("XSERVE_BENCH_MODELS")
	if dir == "" {
		b.Fatal("XSERVE_BENCH_MODELS is not set: run `make bench-models`")
	}
	models := [][3]string{{"cnn", filepath.Join(dir, "cnn.onnx"), filepath.Join(dir, "cnn.image.npy")}}
	if zoo := os.Getenv("XSERVE_ZOO"); zoo != "" {
		names := []string{"resnet18", "resnet50", "resnext50_32x4d", "mobilenet_v2", "mnasnet1_0"}
		if list := os.Getenv("XSERVE_ZOO_MODELS"); list != "" {
			names = strings.Split(list, ",")
		}
		for _, name := range names {
			models = append(models, [3]string{name, filepath.Join(zoo, name, "model.onnx"), filepath.Join(zoo, name, "b1.in.image.npy")})
		}
	}
	off := false
	options := []struct {
		name string
		off  lower.Options
	}{
		{"hwio", lower.Options{ConvWeightsHWIO: &off}},
		{"depthwise", lower.Options{DepthwiseMulAdd: &off}},
		{"asdot", lower.Options{ConvAsDot: &off}},
	}
	if only := os.Getenv("XSERVE_CONV_OPTIONS"); only != "" {
		keep := options[:0]
		for _, o := range options {
			if slices.Contains(strings.Split(only, ","), o.name) {
				keep = append(keep, o)
			}
		}
		options = keep
	}
	client := benchClient(b)
	defer client.Close()
	for _, m := range models {
		for _, o := range options {
			b.Run(m[0]+"/"+o.name, func(b *testing.B) { benchCPUConvOption(b, client, m[1], m[2], o.off) })
		}
	}
}

// benchCPUConvOption runs model with the default options and with off
// (which turns one option off), interleaved.
func benchCPUConvOption(b *testing.B, client *pjrt.Client, model, input string, off lower.Options) {
	ctx := context.Background()
	g, inputs, dims := loadBenchModel(b, model, input)
	w := engine.NewWeights(client)
	defer w.Close()
	off.Platform = client.Platform()
	var exes [2]*engine.Executable
	for i, opts := range []lower.Options{{Platform: client.Platform()}, off} {
		prog, err := lower.New(opts, cpu.Platform()).Lower(g, dims)
		if err != nil {
			b.Fatal(err)
		}
		if exes[i], err = engine.Compile(ctx, client, prog, w); err != nil {
			b.Fatal(err)
		}
		defer exes[i].Close()
		for range 3 { // warm up
			if _, err := exes[i].Run(ctx, inputs); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Medians of the calls, not means: on a shared machine a few calls
	// descheduled for tens of milliseconds would decide a mean.
	var took [2][]float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range exes {
			j := (i + k) % len(exes) // alternate which goes first
			start := time.Now()
			if _, err := exes[j].Run(ctx, inputs); err != nil {
				b.Fatal(err)
			}
			took[j] = append(took[j], ms(time.Since(start)))
		}
	}
	b.StopTimer()
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	def, offMs := median(took[0]), median(took[1])
	b.ReportMetric(def, "default-ms")
	b.ReportMetric(offMs, "off-ms")
	b.ReportMetric(offMs/def, "off/default")
}

// benchClient opens the PJRT plugin the tests use.
func benchClient(b *testing.B) *pjrt.Client {
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: ".."})
	if err != nil {
		b.Fatal(err)
	}
	client, err := pjrt.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	return client
}

// loadBenchModel imports an ONNX model with one input, reads that input and
// binds the model's dims to it.
func loadBenchModel(b *testing.B, model, input string) (*fxgraph.Graph, []*tensor.Tensor, map[string]int64) {
	g, err := onnx.ImportFile(model)
	if err != nil {
		b.Fatal(err)
	}
	in, err := tensor.ReadNpyFile(input)
	if err != nil {
		b.Fatal(err)
	}
	inputs := []*tensor.Tensor{in}
	dims, err := g.BindDims(inputs)
	if err != nil {
		b.Fatal(err)
	}
	return g, inputs, dims
}
