package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

const (
	example   = "../../examples/models/tinycnn"
	sampleDir = "../../examples/samples/tinycnn"
)

func xserve(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := dispatch(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

// TestRunMatchesONNXRuntime runs the example model through the real plugin
// (found without flags, as `make pjrt` installed it) and compares with the
// output ONNX Runtime computed for the same input (committed by
// python/make_examples.py).
func TestRunMatchesONNXRuntime(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cached bool // the second run with --compile-cache loads the executable
	}{{"compiled", false}, {"cached", true}} {
		t.Run(tc.name, func(t *testing.T) { runMatchesONNXRuntime(t, tc.cached, "") })
	}
}

// TestRunMatchesONNXRuntimeCompat is TestRunMatchesONNXRuntime on the
// oldest CPU plugin we test on (make pjrt-compat: PJRT C API 0.81,
// StableHLO 1.13.3), given by --pjrt-plugin.
func TestRunMatchesONNXRuntimeCompat(t *testing.T) {
	plugin, err := pjrt.CompatCPUPlugin("../..")
	if err != nil {
		t.Fatal(err)
	}
	runMatchesONNXRuntime(t, false, plugin)
}

func runMatchesONNXRuntime(t *testing.T, cached bool, plugin string) {
	dir := t.TempDir()
	args := []string{"run", example + "/1/model.onnx", "--input", "image=" + sampleDir + "/image.npy", "--output", dir}
	if plugin != "" {
		args = append(args, "--pjrt-plugin", plugin)
	}
	if cached {
		args = append(args, "--compile-cache", filepath.Join(dir, "cache"))
		if _, stderr, err := xserve(t, args...); err != nil || !strings.Contains(stderr, ", compiled in") {
			t.Fatalf("first xserve run with an empty cache: %v\n%s", err, stderr)
		}
	}
	out, stderr, err := xserve(t, args...)
	if err != nil {
		t.Fatalf("xserve run: %v\n%s", err, stderr)
	}
	if got := strings.Contains(stderr, "loaded from the compile cache"); got != cached {
		t.Errorf("executable from the compile cache: %v, want %v:\n%s", got, cached, stderr)
	}
	if !strings.Contains(stderr, "loaded pjrt cpu") {
		t.Errorf("run did not report the plugin it loaded:\n%s", stderr)
	}
	if plugin != "" && !strings.Contains(stderr, "(api 0.81)") {
		t.Errorf("run did not load the compat plugin (PJRT C API 0.81):\n%s", stderr)
	}
	if !strings.Contains(out, "output probs: float32[2,10]") {
		t.Errorf("unexpected output listing:\n%s", out)
	}
	got, err := tensor.ReadNpyFile(filepath.Join(dir, "probs.npy"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := tensor.ReadNpyFile(sampleDir + "/probs.onnxruntime.npy")
	if err != nil {
		t.Fatal(err)
	}
	if tensor.ShapeString(got.Shape) != tensor.ShapeString(want.Shape) {
		t.Fatalf("shape %v, want %v", got.Shape, want.Shape)
	}
	for i := int64(0); i < want.NumElements(); i++ {
		if d := math.Abs(got.Float64At(i) - want.Float64At(i)); d > 1e-5 {
			t.Fatalf("element %d: got %v, onnxruntime %v", i, got.Float64At(i), want.Float64At(i))
		}
	}
}

func TestInspectPrintsFXTableAndStableHLO(t *testing.T) {
	out, _, err := xserve(t, "inspect", example+"/1/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"input  image: float32[batch,3,32,32]", "opcode", "placeholder", "get_attr", "call_function", "aten.convolution.default", "output"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	hlo, _, err := xserve(t, "inspect", example+"/1/model.onnx", "--stablehlo", "--shape", "image=4x3x32x32")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"func.func @main(%image: tensor<4x3x32x32xf32>", `call_target_name = "xserve_conv_f32"`, "tensor<4x10xf32>"} {
		if !strings.Contains(hlo, want) {
			t.Errorf("StableHLO lacks %q:\n%s", want, hlo)
		}
	}
	plain, _, err := xserve(t, "inspect", example+"/1/model.onnx", "--stablehlo", "--shape", "image=4x3x32x32", "--cpu-kernels=false")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plain, "stablehlo.convolution") || strings.Contains(plain, "custom_call") {
		t.Errorf("with --cpu-kernels=false the StableHLO should have XLA's convolution and no custom call:\n%s", plain)
	}
	again, _, _ := xserve(t, "inspect", example+"/1/model.onnx", "--stablehlo", "--dim", "batch=4")
	if again != hlo {
		t.Error("lowering the same graph and bucket twice gave different StableHLO")
	}
}

// TestInspectCheck: `xserve inspect --platform P --check` lowers for P and
// passes where P lacks nothing, saying what runs slowly.
func TestInspectCheck(t *testing.T) {
	for _, platform := range []string{"cpu", "cuda", "tpu"} {
		out, _, err := xserve(t, "inspect", example+"/1/model.onnx", "--platform", platform, "--check", "--dim", "batch=2")
		if err != nil {
			t.Fatalf("%s: %v\n%s", platform, err, out)
		}
		if want := "ok: nothing platform " + platform + " lacks"; !strings.Contains(out, want) || !strings.Contains(out, "map[batch:2]") {
			t.Errorf("%s: output lacks %q or the bound sizes:\n%s", platform, want, out)
		}
	}
}

// TestVersionNamesCPUKernels: `xserve version` names the CPU kernels the
// plugin's client loaded (make pjrt installs them), or says there are none.
func TestVersionNamesCPUKernels(t *testing.T) {
	out, _, err := xserve(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "cpu kernels: ") {
			line = l
		}
	}
	for _, k := range []string{cpu.ConvKernel, cpu.MatmulKernel, cpu.PoolKernel} {
		if !strings.Contains(line, k) {
			t.Errorf("version output does not name the CPU kernel %s:\n%s", k, out)
		}
	}
	t.Setenv("XSERVE_CPU_KERNELS", "off")
	out, _, err = xserve(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "cpu kernels: none") {
		t.Errorf("with XSERVE_CPU_KERNELS=off, version output does not say so:\n%s", out)
	}
}

// TestVersionNamesPluginPackageAndStableHLO: `xserve version` names the
// package the plugin came from (the VERSION file `make pjrt` writes beside
// it) and the StableHLO versions the plugin accepts, which the images print
// in make docker-test.
func TestVersionNamesPluginPackageAndStableHLO(t *testing.T) {
	out, _, err := xserve(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	var file string
	for _, l := range strings.Split(out, "\n") {
		if f, ok := strings.CutPrefix(l, "pjrt plugin file: "); ok {
			file = f
		}
	}
	dir := filepath.Base(filepath.Dir(file)) // <package>-<version>, as make pjrt names it
	i := strings.LastIndex(dir, "-")
	if i < 0 {
		t.Fatalf("plugin directory %q is not <package>-<version>:\n%s", dir, out)
	}
	for _, want := range []string{
		"plugin package: " + dir[:i] + " " + dir[i+1:] + "\n",
		"stablehlo_current_version=",
		"stablehlo_minimum_version=",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
}

// TestVersionNamesCPUExecution: `xserve version` says how the CPU client runs
// programs (inline by default, async on request), and a mode it does not
// know is refused with the variable named.
func TestVersionNamesCPUExecution(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"", "cpu execution: inline (XSERVE_CPU_EXECUTION)"},
		{"async", "cpu execution: async (XSERVE_CPU_EXECUTION)"},
		{"INLINE", "cpu execution: inline (XSERVE_CPU_EXECUTION)"},
	} {
		t.Setenv("XSERVE_CPU_EXECUTION", tc.env)
		out, _, err := xserve(t, "version")
		if err != nil {
			t.Fatalf("XSERVE_CPU_EXECUTION=%q: %v", tc.env, err)
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("XSERVE_CPU_EXECUTION=%q: version output lacks %q:\n%s", tc.env, tc.want, out)
		}
	}
	t.Setenv("XSERVE_CPU_EXECUTION", "eager")
	_, _, err := xserve(t, "version")
	if err == nil || !strings.Contains(err.Error(), `XSERVE_CPU_EXECUTION="eager"`) {
		t.Errorf("XSERVE_CPU_EXECUTION=eager: err = %v, want one naming the variable and value", err)
	}
}

func TestBadInvocationsGiveClearErrors(t *testing.T) {
	dir := t.TempDir()
	wrongDType := filepath.Join(dir, "int.npy")
	if err := tensor.WriteNpyFile(wrongDType, tensor.New(tensor.Int64, 1, 3, 32, 32)); err != nil {
		t.Fatal(err)
	}
	wrongShape := filepath.Join(dir, "shape.npy")
	if err := tensor.WriteNpyFile(wrongShape, tensor.New(tensor.Float32, 1, 3, 16, 16)); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.onnx")
	os.WriteFile(garbage, []byte("this is not a protobuf"), 0o644)
	model := example + "/1/model.onnx"
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"run", model, "--output", dir}, `no --input for model input "image"`},
		{[]string{"run", model, "--input", "image=" + wrongDType, "--output", dir}, "input image is int64, the model wants float32"},
		{[]string{"run", model, "--input", "image=" + wrongShape, "--output", dir}, "input image dim 2 is 16, the model wants 32"},
		{[]string{"run", model, "--input", "image=" + wrongShape, "--input", "label=x.npy", "--output", dir}, `no input "label"`},
		{[]string{"inspect", model, "--stablehlo"}, "no size for symbols batch"},
		{[]string{"inspect", model, "--stablehlo", "--shape", "image=2x3x9x9"}, "dim 2 of image is fixed at 32"},
		{[]string{"inspect", garbage}, "onnx:"},
		{[]string{"inspect", "model.tflite"}, `unknown model format ".tflite"`},
		{[]string{"inspect", model, "--platform", "metal", "--check"}, `no platform "metal"`},
	}
	for _, tc := range tests {
		_, _, err := xserve(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("xserve %s: err = %v, want it to contain %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

func TestOutputFileName(t *testing.T) {
	for in, want := range map[string]string{"probs": "probs.npy", "out/put:0": "out_put_0.npy", "..": "_...npy", "a b.c": "a_b.c.npy"} {
		if got := outputFileName(in); got != want {
			t.Errorf("outputFileName(%q) = %q, want %q", in, got, want)
		}
	}
}
