package pjrt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// The tests run against the real XLA CPU plugin (`make pjrt`), never a mock.

var (
	clientOnce sync.Once
	sharedCl   *Client
	clientErr  error
)

// repoRoot is the checkout this package lives in (tests run in pjrt/).
func repoRoot(t testing.TB) string {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// testClient returns a client of the real plugin, shared by the tests.
func testClient(t testing.TB) *Client {
	t.Helper()
	clientOnce.Do(func() {
		var path string
		path, clientErr = FindPlugin(FindOptions{RepoRoot: repoRoot(t)})
		if clientErr != nil {
			clientErr = fmt.Errorf("%w\n\nthe pjrt tests need the real XLA CPU plugin: run `make pjrt` (scripts/pjrt-install.sh) first", clientErr)
			return
		}
		sharedCl, clientErr = Open(path)
	})
	if clientErr != nil {
		t.Fatal(clientErr)
	}
	return sharedCl
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedCl != nil {
		if err := sharedCl.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing shared client:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// f32 makes a float32 tensor.
func f32(shape []int64, vals ...float32) *tensor.Tensor {
	data := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	t, err := tensor.FromBytes(tensor.Float32, shape, data)
	if err != nil {
		panic(err)
	}
	return t
}

func float32s(t testing.TB, x *tensor.Tensor) []float32 {
	t.Helper()
	if x.DType != tensor.Float32 {
		t.Fatalf("got dtype %s, want float32", x.DType)
	}
	out := make([]float32, len(x.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(x.Data[4*i:]))
	}
	return out
}

func mustUpload(t testing.TB, c *Client, x *tensor.Tensor) *Buffer {
	t.Helper()
	b, err := c.Upload(context.Background(), x)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mustCompile compiles src with the parameter types testParams gives it
// (none: the arguments are not checked).
func mustCompile(t testing.TB, c *Client, src string) *Executable {
	t.Helper()
	e, err := c.Compile(context.Background(), []byte(src), testParams[src])
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// testParams are the @main parameter types of the tests' programs, which
// Compile takes from its caller.
var testParams = map[string][]Type{
	addProgram:    {f32Type(2, 3), f32Type(2, 3)},
	linearProgram: {f32Type(3, 5), f32Type(4, 3)},
	add16Program:  {f32Type(16), f32Type(16)},
	addOneProgram: {f32Type(2)},
	matmulProgram: {f32Type(512, 512), f32Type(512, 512)},
}

func f32Type(shape ...int64) Type { return Type{DType: tensor.Float32, Shape: shape} }

const addProgram = `module @m {
  func.func @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = stablehlo.add %a, %b : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
}`

// linearProgram computes x·w + 1 with a (4x3)·(3x5) dot at highest precision.
const linearProgram = `module @linear {
  func.func public @main(%w: tensor<3x5xf32>, %x: tensor<4x3xf32>) -> (tensor<4x5xf32> {jax.result_info = "y"}) {
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0], precision = [HIGHEST, HIGHEST] : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
    %one = stablehlo.constant dense<1.0> : tensor<4x5xf32>
    %1 = stablehlo.add %0, %one : tensor<4x5xf32>
    return %1 : tensor<4x5xf32>
  }
}`

// linearWant computes linearProgram in Go.
func linearWant(w, x []float32) []float32 {
	y := make([]float32, 4*5)
	for i := 0; i < 4; i++ {
		for j := 0; j < 5; j++ {
			var s float64
			for k := 0; k < 3; k++ {
				s += float64(x[i*3+k]) * float64(w[k*5+j])
			}
			y[i*5+j] = float32(s + 1)
		}
	}
	return y
}

func closeEnough(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d values, want %d", len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
			return fmt.Errorf("element %d: got %v, want %v (all: got %v, want %v)", i, got[i], want[i], got, want)
		}
	}
	return nil
}

func TestFindPluginOrder(t *testing.T) {
	dir := t.TempDir()
	mk := func(rel string) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("not really a plugin"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cached := mk("cache/pjrt/xla-cpu-pjrt-0.0.1/" + CPUPluginFile)
	mk("cache/pjrt/.install.abc123/" + CPUPluginFile) // half-done install: ignored
	repoCached := mk("repo/.cache/pjrt/xla-cpu-pjrt-0.0.1/" + CPUPluginFile)
	fromEnv := mk("env/plugin.so")
	explicit := mk("flag/plugin.so")
	libtpu := mk("venv/lib/python3.12/site-packages/libtpu/libtpu.so")
	cuda12 := mk("venv/lib/python3.12/site-packages/jax_plugins/xla_cuda12/xla_cuda_plugin.so")
	isolate(t, dir)
	t.Setenv("VIRTUAL_ENV", filepath.Join(dir, "venv"))
	repo := filepath.Join(dir, "repo")

	find := func(opts FindOptions) string {
		t.Helper()
		p, err := FindPlugin(opts)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	check := func(name, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: got %s, want %s", name, got, want)
		}
	}

	check("repo cache", find(FindOptions{RepoRoot: repo}), repoCached)
	t.Setenv(EnvCache, filepath.Join(dir, "cache"))
	check("$XSERVE_CACHE before repo", find(FindOptions{RepoRoot: repo}), cached)
	check("platform cpu", find(FindOptions{Path: "cpu", RepoRoot: repo}), cached)
	check("platform tpu", find(FindOptions{Path: "tpu"}), libtpu)
	check("platform cuda", find(FindOptions{Path: "cuda"}), cuda12)
	check("platform gpu", find(FindOptions{Path: "GPU"}), cuda12)
	t.Setenv(EnvPlugin, fromEnv)
	check("env wins over cache", find(FindOptions{RepoRoot: repo}), fromEnv)
	check("explicit path wins over env", find(FindOptions{Path: explicit, RepoRoot: repo}), explicit)
	t.Setenv(EnvPlugin, "tpu")
	check("env platform", find(FindOptions{}), libtpu)

	// A conda environment's JAX, CUDA 13 before 12, after $VIRTUAL_ENV's.
	cuda13 := mk("conda/lib/python3.12/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so")
	t.Setenv("CONDA_PREFIX", filepath.Join(dir, "conda"))
	check("cuda: the virtualenv first", find(FindOptions{Path: "cuda"}), cuda12)
	t.Setenv("VIRTUAL_ENV", "")
	check("cuda: conda", find(FindOptions{Path: "cuda"}), cuda13)
	t.Setenv("CONDA_PREFIX", "")

	// A relative explicit path comes back absolute.
	t.Chdir(filepath.Join(dir, "flag"))
	check("relative path", find(FindOptions{Path: "plugin.so"}), explicit)

	// Walking up from the working directory finds <ancestor>/.cache.
	t.Setenv(EnvPlugin, "")
	t.Setenv(EnvCache, "")
	t.Chdir(filepath.Join(dir, "repo", ".cache", "pjrt"))
	check("cwd walk-up", find(FindOptions{}), repoCached)
}

// isolate points every place FindPlugin looks at into dir, so the test does not
// see what this machine has installed.
func isolate(t *testing.T, dir string) {
	t.Helper()
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", filepath.Join(home, ".cache"))
	t.Setenv(EnvPlugin, "")
	t.Setenv(EnvCache, "")
	t.Setenv("VIRTUAL_ENV", "")
	t.Setenv("CONDA_PREFIX", "")
	t.Chdir(home)
	oldSys, oldExe := systemSitePackages, executableDir
	systemSitePackages = []string{filepath.Join(dir, "usr/lib/python3*/site-packages")}
	executableDir = func() string { return filepath.Join(dir, "bin") }
	t.Cleanup(func() { systemSitePackages, executableDir = oldSys, oldExe })
}

func TestFindPluginErrors(t *testing.T) {
	dir := t.TempDir()
	isolate(t, dir)
	repo := filepath.Join(dir, "repo")

	_, err := FindPlugin(FindOptions{RepoRoot: repo})
	if !errors.Is(err, ErrPluginNotFound) {
		t.Fatalf("got %v, want ErrPluginNotFound", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"pjrt: ",
		"make pjrt",
		filepath.Join(repo, ".cache", "pjrt", "*", CPUPluginFile),
		filepath.Join(dir, "home", ".cache", "pjrt", "*", CPUPluginFile), // cwd walk-up
		filepath.Join(dir, "bin", ".cache", "pjrt", "*", CPUPluginFile),  // executable walk-up
		filepath.Join(dir, "home", ".cache", "xserve", "pjrt", "*", CPUPluginFile),
		"libtpu/libtpu.so",
		"jax_plugins/xla_cuda13/xla_cuda_plugin.so",
		"jax_plugins/xla_cuda12/xla_cuda_plugin.so",
		filepath.Join(dir, "usr/lib/python3*/site-packages"),
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}

	_, err = FindPlugin(FindOptions{Path: "tpu"})
	if !errors.Is(err, ErrPluginNotFound) || !strings.Contains(err.Error(), "tpu PJRT plugin") || strings.Contains(err.Error(), CPUPluginFile) {
		t.Errorf("tpu: got %v", err)
	}

	missing := filepath.Join(dir, "nope.so")
	_, err = FindPlugin(FindOptions{Path: missing})
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing explicit path: got %v", err)
	}
	t.Setenv(EnvPlugin, missing)
	_, err = FindPlugin(FindOptions{RepoRoot: repo})
	if err == nil || !strings.Contains(err.Error(), EnvPlugin) {
		t.Errorf("missing env path: got %v", err)
	}
	_, err = FindPlugin(FindOptions{Path: dir})
	if err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: got %v", err)
	}
	if _, err := Open(missing); err == nil {
		t.Error("Open of a missing file succeeded")
	}
	if _, err := Open(""); err == nil {
		t.Error("Open of an empty path succeeded")
	}
}

func TestOpen(t *testing.T) {
	c := testClient(t)
	if got := c.Platform(); got != "cpu" {
		t.Errorf("Platform() = %q, want cpu", got)
	}
	if !strings.HasPrefix(c.PluginVersion(), "0.") || !strings.Contains(c.PluginVersion(), "stablehlo_current_version=") {
		t.Errorf("PluginVersion() = %q", c.PluginVersion())
	}
	if !filepath.IsAbs(c.PluginPath()) {
		t.Errorf("PluginPath() = %q, not absolute", c.PluginPath())
	}
	want := "pjrt cpu (api " + strings.Fields(c.PluginVersion())[0] + ") " + c.PluginPath()
	if c.String() != want {
		t.Errorf("String() = %q, want %q", c.String(), want)
	}
	t.Logf("%s, plugin version %s", c, c.PluginVersion())
}

func TestCompileAndRun(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	e := mustCompile(t, c, addProgram)
	defer e.Close()
	if e.NumOutputs() != 1 || e.Name() != "m" {
		t.Errorf("NumOutputs=%d Name=%q", e.NumOutputs(), e.Name())
	}
	if s := e.String(); s != `pjrt executable "m" (2 inputs, 1 output)` {
		t.Errorf("String() = %q", s)
	}
	a := mustUpload(t, c, f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6))
	defer a.Close()
	b := mustUpload(t, c, f32([]int64{2, 3}, 10, 20, 30, 40, 50, 60.5))
	defer b.Close()

	outs, err := e.Execute(ctx, []*Buffer{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || outs[0].DType() != tensor.Float32 || tensor.ShapeString(outs[0].Shape()) != "[2,3]" {
		t.Fatalf("outputs %v", outs)
	}
	if s := outs[0].String(); s != "pjrt buffer float32[2,3]" {
		t.Errorf("String() = %q", s)
	}
	y, err := outs[0].ToHost(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := closeEnough(float32s(t, y), []float32{11, 22, 33, 44, 55, 66.5}); err != nil {
		t.Error(err)
	}
	if err := outs[0].Close(); err != nil {
		t.Error(err)
	}
	// The arguments were not donated: use them again, also twice in one call.
	ts, err := e.Run(ctx, []*Buffer{a, a})
	if err != nil {
		t.Fatal(err)
	}
	if err := closeEnough(float32s(t, ts[0]), []float32{2, 4, 6, 8, 10, 12}); err != nil {
		t.Error(err)
	}
}

func TestExecuteReusedWeights(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	e := mustCompile(t, c, linearProgram)
	defer e.Close()
	w := make([]float32, 15)
	for i := range w {
		w[i] = float32(i)*0.25 - 1.5
	}
	wb := mustUpload(t, c, f32([]int64{3, 5}, w...))
	defer wb.Close()
	for iter := 0; iter < 100; iter++ {
		x := make([]float32, 12)
		for i := range x {
			x[i] = float32(iter) - float32(i)*0.5
		}
		xb := mustUpload(t, c, f32([]int64{4, 3}, x...))
		ts, err := e.Run(ctx, []*Buffer{wb, xb})
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		if err := xb.Close(); err != nil {
			t.Fatal(err)
		}
		if got := tensor.ShapeString(ts[0].Shape); got != "[4,5]" {
			t.Fatalf("iteration %d: shape %s", iter, got)
		}
		if err := closeEnough(float32s(t, ts[0]), linearWant(w, x)); err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
	}
}

func TestExecuteConcurrent(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	e := mustCompile(t, c, linearProgram)
	defer e.Close()
	w := make([]float32, 15)
	for i := range w {
		w[i] = float32(i%7) - 2
	}
	wb := mustUpload(t, c, f32([]int64{3, 5}, w...))
	defer wb.Close()

	const goroutines, iters = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := 0; it < iters; it++ {
				x := make([]float32, 12)
				for i := range x {
					x[i] = float32(g*1000+it) + float32(i)
				}
				xb, err := c.Upload(ctx, f32([]int64{4, 3}, x...))
				if err != nil {
					errs <- err
					return
				}
				outs, err := e.Execute(ctx, []*Buffer{wb, xb})
				xb.Close()
				if err != nil {
					errs <- err
					return
				}
				y, err := outs[0].ToHost(ctx)
				outs[0].Close()
				if err != nil {
					errs <- err
					return
				}
				if err := closeEnough(float32s(t, y), linearWant(w, x)); err != nil {
					errs <- fmt.Errorf("goroutine %d iteration %d: %w", g, it, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestMultipleOutputsScalarsAndZeroSize(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	e := mustCompile(t, c, `module @multi {
  func.func @main(%s: tensor<f32>, %z: tensor<0x3xf32>, %i: tensor<4xi32>) -> (tensor<f32>, tensor<0x3xf32>, tensor<4xi32>, tensor<2xf64>) {
    %0 = stablehlo.multiply %s, %s : tensor<f32>
    %1 = stablehlo.negate %z : tensor<0x3xf32>
    %2 = stablehlo.add %i, %i : tensor<4xi32>
    %3 = stablehlo.constant dense<[0.5, -2.25]> : tensor<2xf64>
    return %0, %1, %2, %3 : tensor<f32>, tensor<0x3xf32>, tensor<4xi32>, tensor<2xf64>
  }
}`)
	defer e.Close()
	if e.NumOutputs() != 4 {
		t.Fatalf("NumOutputs() = %d, want 4", e.NumOutputs())
	}
	s := mustUpload(t, c, tensor.Scalar(tensor.Float32, 3))
	z := mustUpload(t, c, tensor.New(tensor.Float32, 0, 3))
	i := mustUpload(t, c, tensor.FromInt64s([]int64{1, -2, 3, 1 << 20}).Convert(tensor.Int32))
	ts, err := e.Run(ctx, []*Buffer{s, z, i})
	if err != nil {
		t.Fatal(err)
	}
	if got := ts[0]; got.Rank() != 0 || got.Float64At(0) != 9 {
		t.Errorf("scalar: got %v %v", got, got.Float64s())
	}
	if got := ts[1]; got.String() != "float32[0,3]" || len(got.Data) != 0 {
		t.Errorf("zero-size: got %v with %d bytes", got, len(got.Data))
	}
	if got := ts[2]; got.String() != "int32[4]" || fmt.Sprint(got.Int64s()) != "[2 -4 6 2097152]" {
		t.Errorf("int32: got %v %v", got, got.Int64s())
	}
	if got := ts[3]; got.String() != "float64[2]" || fmt.Sprint(got.Float64s()) != "[0.5 -2.25]" {
		t.Errorf("float64: got %v %v", got, got.Float64s())
	}
}

func TestExecuteChecksArguments(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	e := mustCompile(t, c, addProgram)
	defer e.Close()
	a := mustUpload(t, c, f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6))
	defer a.Close()
	wrongDType := mustUpload(t, c, tensor.New(tensor.Int32, 2, 3)) // same byte size
	defer wrongDType.Close()
	wrongShape := mustUpload(t, c, tensor.New(tensor.Float32, 3, 2)) // same byte size
	defer wrongShape.Close()
	for _, tc := range []struct {
		name string
		args []*Buffer
		want string
	}{
		{"too few", []*Buffer{a}, "got 1 arguments, program wants 2"},
		{"nil", []*Buffer{a, nil}, "argument 1 is nil"},
		{"dtype", []*Buffer{a, wrongDType}, "argument 1 is int32[2,3], program wants float32[2,3]"},
		{"shape", []*Buffer{wrongShape, a}, "argument 0 is float32[3,2], program wants float32[2,3]"},
	} {
		_, err := e.Execute(ctx, tc.args)
		if err == nil || !strings.HasPrefix(err.Error(), "pjrt: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.Execute(cancelled, []*Buffer{a, a}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: got %v", err)
	}
	if _, err := c.Upload(cancelled, tensor.New(tensor.Float32)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled upload: got %v", err)
	}
}

func TestUploadErrors(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		t    *tensor.Tensor
	}{
		{"nil", nil},
		{"short data", &tensor.Tensor{DType: tensor.Float32, Shape: []int64{2}, Data: make([]byte, 4)}},
		{"string", &tensor.Tensor{DType: tensor.String, Shape: []int64{1}, Strings: [][]byte{[]byte("x")}}},
		{"invalid dtype", &tensor.Tensor{DType: tensor.Invalid}},
		{"negative dim", &tensor.Tensor{DType: tensor.Int8, Shape: []int64{-1}}},
	} {
		b, err := c.Upload(ctx, tc.t)
		if err == nil {
			b.Close()
			t.Errorf("%s: no error", tc.name)
		} else if !strings.HasPrefix(err.Error(), "pjrt: ") {
			t.Errorf("%s: error %q lacks the pjrt: prefix", tc.name, err)
		}
	}
}

var allDTypes = []tensor.DType{
	tensor.Bool, tensor.Int8, tensor.Int16, tensor.Int32, tensor.Int64,
	tensor.Uint8, tensor.Uint16, tensor.Uint32, tensor.Uint64,
	tensor.Float16, tensor.BFloat16, tensor.Float32, tensor.Float64,
	tensor.Complex64, tensor.Complex128,
}

func TestUploadToHostRoundTrip(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	for _, dt := range allDTypes {
		for _, shape := range [][]int64{{}, {0}, {3}, {2, 3, 4}, {2, 0, 4}} {
			t.Run(dt.String()+tensor.ShapeString(shape), func(t *testing.T) {
				x := tensor.New(dt, shape...)
				for i := range x.Data {
					if dt == tensor.Bool {
						x.Data[i] = byte(i % 2)
					} else {
						x.Data[i] = byte(i*37 + 11) // arbitrary bit patterns, NaNs included
					}
				}
				want := x.Clone()
				b, err := c.Upload(ctx, x)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				for i := range x.Data { // the device has its own copy
					x.Data[i] ^= 0xff
				}
				if b.DType() != dt || tensor.ShapeString(b.Shape()) != tensor.ShapeString(shape) {
					t.Fatalf("buffer is %s", b)
				}
				got, err := b.ToHost(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got.DType != dt || tensor.ShapeString(got.Shape) != tensor.ShapeString(shape) || got.Shape == nil {
					t.Fatalf("got %v (shape %#v)", got, got.Shape)
				}
				if string(got.Data) != string(want.Data) {
					t.Fatalf("data: got %x, want %x", got.Data, want.Data)
				}
			})
		}
	}
}

func TestDTypeMapping(t *testing.T) {
	for _, dt := range allDTypes {
		bt, err := bufferType(dt)
		if err != nil {
			t.Fatal(err)
		}
		back, err := dtypeOf(bt)
		if err != nil || back != dt {
			t.Errorf("%s -> %s -> %s, %v", dt, enumNames["PJRT_Buffer_Type"][int(bt)], back, err)
		}
	}
	// The names the header gives the types, for a few.
	for dt, want := range map[tensor.DType]string{tensor.Bool: "PRED", tensor.Float32: "F32", tensor.BFloat16: "BF16", tensor.Complex128: "C128", tensor.Uint64: "U64"} {
		if bt, _ := bufferType(dt); enumNames["PJRT_Buffer_Type"][int(bt)] != want {
			t.Errorf("%s is PJRT_Buffer_Type_%s, want %s", dt, enumNames["PJRT_Buffer_Type"][int(bt)], want)
		}
	}
	for _, dt := range []tensor.DType{tensor.Invalid, tensor.String, tensor.DType(200)} {
		if _, err := bufferType(dt); err == nil || !strings.HasPrefix(err.Error(), "pjrt: ") {
			t.Errorf("%s: got %v", dt, err)
		}
	}
}

func TestCompileInvalid(t *testing.T) {
	c := testClient(t)
	for name, src := range map[string]string{
		"garbage":   "this is not MLIR",
		"type":      strings.Replace(addProgram, "stablehlo.add %a, %b : tensor<2x3xf32>", "stablehlo.add %a, %b : tensor<2x4xf32>", 1),
		"no main":   strings.Replace(addProgram, "@main", "@other", 1),
		"empty":     "",
		"truncated": addProgram[:len(addProgram)/2],
	} {
		e, err := c.Compile(context.Background(), []byte(src), nil)
		if err == nil {
			e.Close()
			t.Errorf("%s: compiled", name)
			continue
		}
		if !strings.HasPrefix(err.Error(), "pjrt: compile") {
			t.Errorf("%s: error %q", name, err)
		}
	}
}

func TestCloseTwiceAndUseAfterClose(t *testing.T) {
	c, err := Open(testClient(t).PluginPath()) // a client of its own
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := mustCompile(t, c, addProgram)
	e2 := mustCompile(t, c, addProgram)
	a := mustUpload(t, c, f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6))
	b := mustUpload(t, c, f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6))

	for i := 0; i < 2; i++ {
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := e2.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Execute(ctx, []*Buffer{a, b}); !errors.Is(err, ErrClosed) {
		t.Errorf("closed argument: got %v", err)
	}
	if _, err := b.ToHost(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("closed buffer: got %v", err)
	}
	if _, err := e2.Execute(ctx, []*Buffer{a, a}); !errors.Is(err, ErrClosed) {
		t.Errorf("closed executable: got %v", err)
	}
	if !strings.HasSuffix(b.String(), "(closed)") || !strings.HasSuffix(e2.String(), "(closed)") {
		t.Errorf("String of closed objects: %q, %q", b, e2)
	}

	// Closing the client closes the executables and invalidates the buffers.
	for i := 0; i < 2; i++ {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Execute(ctx, []*Buffer{a, a}); !errors.Is(err, ErrClosed) {
		t.Errorf("execute after client close: got %v", err)
	}
	if _, err := a.ToHost(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("to host after client close: got %v", err)
	}
	if _, err := c.Upload(ctx, tensor.New(tensor.Float32)); !errors.Is(err, ErrClosed) {
		t.Errorf("upload after client close: got %v", err)
	}
	if _, err := c.Compile(ctx, []byte(addProgram), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("compile after client close: got %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	}
}

func BenchmarkExecuteSmall(b *testing.B) {
	c := testClient(b)
	ctx := context.Background()
	e := mustCompile(b, c, addProgram)
	defer e.Close()
	x := mustUpload(b, c, f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6))
	defer x.Close()
	args := []*Buffer{x, x}
	b.ReportAllocs()
	for b.Loop() {
		outs, err := e.Execute(ctx, args)
		if err != nil {
			b.Fatal(err)
		}
		outs[0].Close()
	}
}

func BenchmarkRunSmall(b *testing.B) {
	c := testClient(b)
	ctx := context.Background()
	e := mustCompile(b, c, addProgram)
	defer e.Close()
	x := mustUpload(b, c, f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6))
	defer x.Close()
	args := []*Buffer{x, x}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Run(ctx, args); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTarget: the compile target names the platform, the host's CPU
// features and the device kind the plugin reports.
func TestTarget(t *testing.T) {
	c := testClient(t)
	got := c.Target()
	for _, want := range []string{"platform=cpu", "plugin=0.", "host=\"linux/amd64 cpu:", "device_kind=\"cpu\""} {
		if !strings.Contains(got, want) {
			t.Errorf("Target() = %s, lacks %s", got, want)
		}
	}
	if again := c.Target(); again != got {
		t.Errorf("Target() changed: %s, then %s", got, again)
	}
}
