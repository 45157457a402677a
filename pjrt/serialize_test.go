package pjrt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xserve/xserve/tensor"
)

// The CPU plugin (xla_cpu_pjrt 0.0.1, PJRT C API 0.81) implements both
// PJRT_Executable_Serialize and PJRT_Executable_DeserializeAndLoad: its
// serialization is an XLA:CPU AOT result (the compiled object code and the
// HLO module), so deserializing skips compilation.

// serialized compiles src and serializes it.
func serialized(t testing.TB, c *Client, src string) []byte {
	t.Helper()
	e := mustCompile(t, c, src)
	defer e.Close()
	data, err := e.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mustDeserialize(t testing.TB, c *Client, data []byte) *Executable {
	t.Helper()
	e, err := c.Deserialize(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// run runs e on host tensors uploaded to its client.
func run(t testing.TB, e *Executable, args ...*tensor.Tensor) []*tensor.Tensor {
	t.Helper()
	bufs := make([]*Buffer, len(args))
	for i, a := range args {
		bufs[i] = mustUpload(t, e.client, a)
		defer bufs[i].Close()
	}
	outs, err := e.Run(context.Background(), bufs)
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

// sameTensors fails unless got and want are bit-for-bit equal.
func sameTensors(t testing.TB, what string, got, want []*tensor.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i].DType != want[i].DType || !reflect.DeepEqual(got[i].Shape, want[i].Shape) || string(got[i].Data) != string(want[i].Data) {
			t.Fatalf("%s: output %d is %s %v, want %s %v", what, i, got[i], got[i].Data, want[i], want[i].Data)
		}
	}
}

func randomF32(r *rand.Rand, shape ...int64) *tensor.Tensor {
	vals := make([]float32, tensor.NumElements(shape))
	for i := range vals {
		vals[i] = float32(r.NormFloat64())
	}
	return f32(shape, vals...)
}

func TestSerializeRoundTrip(t *testing.T) {
	ctx := context.Background()
	c := testClient(t)
	orig := mustCompile(t, c, linearProgram)
	defer orig.Close()
	w := []float32{1, 2, 3, 4, 5, -1, -2, -3, -4, -5, 0.5, 0.25, 0.125, 2, 3}
	x := []float32{1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 2, 3}
	wt, xt := f32([]int64{3, 5}, w...), f32([]int64{4, 3}, x...)
	want := run(t, orig, wt, xt)
	if err := closeEnough(float32s(t, want[0]), linearWant(w, x)); err != nil {
		t.Fatal(err)
	}

	data, err := orig.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("serialized %s: %d bytes", orig, len(data))

	check := func(what string, e *Executable) {
		t.Helper()
		if e.Name() != "linear" || e.NumOutputs() != 1 || e.String() != orig.String() {
			t.Errorf("%s: got %s (name %q, %d outputs), want %s", what, e, e.Name(), e.NumOutputs(), orig)
		}
		sameTensors(t, what, run(t, e, wt, xt), want)
		// The @main parameter types travel with the executable, so the
		// arguments are still checked.
		i32, _ := tensor.FromBytes(tensor.Int32, []int64{4, 3}, make([]byte, 48))
		bw, bx := mustUpload(t, e.client, wt), mustUpload(t, e.client, i32)
		defer bw.Close()
		defer bx.Close()
		if _, err := e.Execute(ctx, []*Buffer{bw, bx}); err == nil || !strings.Contains(err.Error(), "argument 1 is int32[4,3], program wants float32[4,3]") {
			t.Errorf("%s: execute with a wrong argument: got %v", what, err)
		}
	}

	// Same client.
	same := mustDeserialize(t, c, data)
	defer same.Close()
	check("deserialized in the same client", same)

	// The plugin's serialization of a deserialized executable lacks the
	// kernels' object code (executing what it deserializes to fails with
	// "Function dot.1_kernel not found"), so Serialize refuses it.
	if _, err := same.Serialize(); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "was deserialized") {
		t.Errorf("Serialize of a deserialized executable: got %v", err)
	}

	// A new client, as after a restart (the plugin stays loaded).
	c2, err := Open(c.PluginPath())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fresh := mustDeserialize(t, c2, data)
	check("deserialized in a new client", fresh)
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Serialize(); !errors.Is(err, ErrClosed) {
		t.Errorf("Serialize after its client closed: got %v", err)
	}
}

func TestSerializeProgramsWithoutKnownSignature(t *testing.T) {
	// Compiled without parameter types (MLIR generic form, say): the
	// deserialized executable does not know them either.
	const generic = `"builtin.module"() ({
  "func.func"() <{function_type = (tensor<3xf32>) -> (tensor<3xf32>, tensor<f32>), sym_name = "main"}> ({
  ^bb0(%x: tensor<3xf32>):
    %0 = "stablehlo.multiply"(%x, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %s = "stablehlo.reduce"(%x, %z) ({
    ^bb1(%a: tensor<f32>, %b: tensor<f32>):
      %r = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
    "func.return"(%0, %s) : (tensor<3xf32>, tensor<f32>) -> ()
  }) : () -> ()
}) : () -> ()`
	c := testClient(t)
	orig := mustCompile(t, c, generic)
	defer orig.Close()
	if orig.params != nil {
		t.Fatal("test program compiled with parameter types")
	}
	data, err := orig.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	e := mustDeserialize(t, c, data)
	defer e.Close()
	if e.params != nil || e.NumOutputs() != 2 || e.String() != orig.String() {
		t.Errorf("got %s, want %s", e, orig)
	}
	x := f32([]int64{3}, 1, 2, 3)
	sameTensors(t, "generic program", run(t, e, x), run(t, orig, x))
}

func TestDeserializeCorrupt(t *testing.T) {
	ctx := context.Background()
	c := testClient(t)
	data := serialized(t, c, addProgram)
	h, payload, err := unmarshalEnvelope(data)
	if err != nil {
		t.Fatal(err)
	}
	rewrap := func(h envelopeHeader, payload []byte) []byte {
		d, err := marshalEnvelope(h, payload)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	flip := func(d []byte, at int) []byte {
		d = append([]byte{}, d...)
		d[at] ^= 0x40
		return d
	}
	r := rand.New(rand.NewPCG(1, 2))
	garbage := make([]byte, len(payload))
	for i := range garbage {
		garbage[i] = byte(r.Uint32())
	}
	otherPlugin, lessOutputs, badParam := h, h, h
	otherPlugin.PluginVersion += "-other"
	lessOutputs.NumOutputs = 0
	badParam.Params = []paramHeader{{DType: "float99"}}

	for _, tc := range []struct {
		name string
		data []byte
		want string // in the error
	}{
		{"nil", nil, "not data from Executable.Serialize"},
		{"short", []byte("x"), "not data from Executable.Serialize"},
		{"StableHLO text", []byte(addProgram), "not data from Executable.Serialize"},
		{"truncated", data[:len(data)-1], "checksum mismatch"},
		{"truncated to half", data[:len(data)/2], "checksum mismatch"},
		{"bit flipped in header", flip(data, 20), "checksum mismatch"},
		{"bit flipped in payload", flip(data, len(data)-len(payload)/2), "checksum mismatch"},
		{"bit flipped in checksum", flip(data, len(data)-1), "checksum mismatch"},
		{"extra byte", append(append([]byte{}, data...), 0), "checksum mismatch"},
		{"another plugin", rewrap(otherPlugin, payload), "serialized by plugin"},
		{"wrong output count", rewrap(lessOutputs, payload), "has 1 outputs, header says 0"},
		{"bad parameter type", rewrap(badParam, payload), "parameter 0"},
		// Past our checks: the plugin itself rejects these.
		{"garbage payload", rewrap(h, garbage), "plugin rejected the serialized executable"},
		{"payload truncated", rewrap(h, payload[:len(payload)/2]), "plugin rejected the serialized executable"},
		{"payload of one byte", rewrap(h, payload[:1]), "plugin rejected the serialized executable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := c.Deserialize(ctx, tc.data)
			if err == nil {
				e.Close()
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), "pjrt: deserialize") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
			if errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("corrupt data reported as unsupported: %v", err)
			}
		})
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Deserialize(canceled, data); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: got %v", err)
	}
	// The client is still fine.
	e := mustDeserialize(t, c, data)
	defer e.Close()
	a := f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6)
	if got := float32s(t, run(t, e, a, a)[0]); fmt.Sprint(got) != "[2 4 6 8 10 12]" {
		t.Errorf("got %v", got)
	}
}

func TestDeserializedConcurrentExecute(t *testing.T) {
	ctx := context.Background()
	c := testClient(t)
	orig := mustCompile(t, c, linearProgram)
	defer orig.Close()
	data, err := orig.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	e := mustDeserialize(t, c, data)
	defer e.Close()

	w := []float32{1, 2, 3, 4, 5, -1, -2, -3, -4, -5, 0.5, 0.25, 0.125, 2, 3}
	wb := mustUpload(t, c, f32([]int64{3, 5}, w...)) // shared by every call
	defer wb.Close()
	const goroutines, calls = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines+3)
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				x := make([]float32, 12)
				for j := range x {
					x[j] = float32(g*100 + i + j)
				}
				xb, err := c.Upload(ctx, f32([]int64{4, 3}, x...))
				if err != nil {
					errs <- err
					return
				}
				outs, err := e.Run(ctx, []*Buffer{wb, xb})
				xb.Close()
				if err != nil {
					errs <- err
					return
				}
				got := make([]float32, 20)
				for j := range got {
					got[j] = float32(outs[0].Float64At(int64(j)))
				}
				if err := closeEnough(got, linearWant(w, x)); err != nil {
					errs <- fmt.Errorf("goroutine %d call %d: %w", g, i, err)
					return
				}
			}
		})
	}
	// Serializing concurrently with executions is fine too. (The bytes
	// differ from call to call: the plugin writes a protobuf map in no
	// fixed order.)
	for range 3 {
		wg.Go(func() {
			xb, err := c.Upload(ctx, f32([]int64{4, 3}, make([]float32, 12)...))
			if err != nil {
				errs <- err
				return
			}
			defer xb.Close()
			if _, err := orig.Run(ctx, []*Buffer{wb, xb}); err != nil {
				errs <- err
			}
		})
		if d, err := orig.Serialize(); err != nil {
			t.Error(err)
		} else if len(d) != len(data) {
			t.Errorf("serialization changed size: %d bytes, then %d", len(data), len(d))
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestDeserializedClose(t *testing.T) {
	ctx := context.Background()
	c := testClient(t)
	data := serialized(t, c, addProgram)
	a := mustUpload(t, c, f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6))
	defer a.Close()

	e := mustDeserialize(t, c, data)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := e.Execute(ctx, []*Buffer{a, a}); !errors.Is(err, ErrClosed) {
		t.Errorf("Execute after Close: got %v", err)
	}
	if _, err := e.Serialize(); !errors.Is(err, ErrClosed) {
		t.Errorf("Serialize after Close: got %v", err)
	}
	if !strings.HasSuffix(e.String(), "(closed)") {
		t.Errorf("String after Close: %s", e)
	}

	// Closing the client closes its deserialized executables.
	c2, err := Open(c.PluginPath())
	if err != nil {
		t.Fatal(err)
	}
	e2 := mustDeserialize(t, c2, data)
	e3 := mustDeserialize(t, c2, data)
	if err := e3.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatalf("second client Close: %v", err)
	}
	if _, err := e2.Run(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after client Close: got %v", err)
	}
	for _, e := range []*Executable{e2, e3} {
		if err := e.Close(); err != nil {
			t.Errorf("Close after client Close: %v", err)
		}
	}
	if _, err := c2.Deserialize(ctx, data); !errors.Is(err, ErrClosed) {
		t.Errorf("Deserialize on a closed client: got %v", err)
	}
}

// mlpProgram is a mid-size program: layers of dot + bias + tanh on a
// batch x width activation, with a softmax every third layer.
func mlpProgram(batch, width, layers int) string {
	var b strings.Builder
	act := fmt.Sprintf("tensor<%dx%dxf32>", batch, width)
	vec := fmt.Sprintf("tensor<%dxf32>", batch)
	fmt.Fprintf(&b, "module @mlp {\n  func.func @main(%%x: %s, %%w: tensor<%dx%dxf32>, %%b: tensor<%dxf32>) -> %s {\n", act, width, width, width, act)
	fmt.Fprintf(&b, "    %%ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>\n    %%zero = stablehlo.constant dense<0.0> : tensor<f32>\n")
	fmt.Fprintf(&b, "    %%bb = \"stablehlo.broadcast_in_dim\"(%%b) {broadcast_dimensions = array<i64: 1>} : (tensor<%dxf32>) -> %s\n", width, act)
	h := "%x"
	reduce := func(out, in, init, op string) {
		fmt.Fprintf(&b, "    %s = \"stablehlo.reduce\"(%s, %s) ({\n    ^bb0(%%p: tensor<f32>, %%q: tensor<f32>):\n", out, in, init)
		fmt.Fprintf(&b, "      %%r = \"%s\"(%%p, %%q) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n      \"stablehlo.return\"(%%r) : (tensor<f32>) -> ()\n", op)
		fmt.Fprintf(&b, "    }) {dimensions = array<i64: 1>} : (%s, tensor<f32>) -> %s\n", act, vec)
	}
	for i := range layers {
		fmt.Fprintf(&b, "    %%d%d = stablehlo.dot_general %s, %%w, contracting_dims = [1] x [0] : (%s, tensor<%dx%dxf32>) -> %s\n", i, h, act, width, width, act)
		fmt.Fprintf(&b, "    %%a%d = stablehlo.add %%d%d, %%bb : %s\n", i, i, act)
		fmt.Fprintf(&b, "    %%t%d = stablehlo.tanh %%a%d : %s\n", i, i, act)
		h = fmt.Sprintf("%%t%d", i)
		if i%3 == 2 {
			reduce(fmt.Sprintf("%%m%d", i), h, "%ninf", "stablehlo.maximum")
			fmt.Fprintf(&b, "    %%mb%d = \"stablehlo.broadcast_in_dim\"(%%m%d) {broadcast_dimensions = array<i64: 0>} : (%s) -> %s\n", i, i, vec, act)
			fmt.Fprintf(&b, "    %%s%d = stablehlo.subtract %s, %%mb%d : %s\n", i, h, i, act)
			fmt.Fprintf(&b, "    %%e%d = stablehlo.exponential %%s%d : %s\n", i, i, act)
			reduce(fmt.Sprintf("%%z%d", i), fmt.Sprintf("%%e%d", i), "%zero", "stablehlo.add")
			fmt.Fprintf(&b, "    %%zb%d = \"stablehlo.broadcast_in_dim\"(%%z%d) {broadcast_dimensions = array<i64: 0>} : (%s) -> %s\n", i, i, vec, act)
			fmt.Fprintf(&b, "    %%n%d = stablehlo.divide %%e%d, %%zb%d : %s\n", i, i, i, act)
			h = fmt.Sprintf("%%n%d", i)
		}
	}
	fmt.Fprintf(&b, "    return %s : %s\n  }\n}\n", h, act)
	return b.String()
}

func TestSerializeCompileVsDeserializeTime(t *testing.T) {
	const batch, width, layers = 16, 128, 60
	src := mlpProgram(batch, width, layers)
	c := testClient(t)

	start := time.Now()
	orig := mustCompile(t, c, src)
	compile := time.Since(start)
	defer orig.Close()

	start = time.Now()
	data, err := orig.Serialize()
	ser := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	same := mustDeserialize(t, c, data)
	deser := time.Since(start)
	defer same.Close()

	c2, err := Open(c.PluginPath())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	start = time.Now()
	fresh := mustDeserialize(t, c2, data)
	deserNew := time.Since(start)

	t.Logf("mlp program (%d layers of %dx%d, %d bytes of StableHLO): compile %v, serialize %v (%d bytes), "+
		"deserialize %v (same client), %v (new client); compile/deserialize = %.0fx",
		layers, batch, width, len(src), compile.Round(time.Microsecond), ser.Round(time.Microsecond), len(data),
		deser.Round(time.Microsecond), deserNew.Round(time.Microsecond), float64(compile)/float64(max(deser, deserNew)))

	r := rand.New(rand.NewPCG(3, 4))
	x, w, b := randomF32(r, batch, width), randomF32(r, width, width), randomF32(r, width)
	// Scale the weights down so that tanh does not saturate.
	for i := range int64(width * width) {
		w.SetFloat64(i, w.Float64At(i)/math.Sqrt(width))
	}
	want := run(t, orig, x, w, b)
	sameTensors(t, "same client", run(t, same, x, w, b), want)
	sameTensors(t, "new client", run(t, fresh, x, w, b), want)
}

// TestPluginLoadedOnce: a second client of the same plugin file shares the
// loaded plugin and has a client of its own, executables move between the
// two serialized, and a file that is not a PJRT plugin is an error naming
// it.
func TestPluginLoadedOnce(t *testing.T) {
	c := testClient(t)
	c2, err := Open(c.PluginPath())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.api != c.api {
		t.Errorf("second Open of %s loaded the plugin again", c.PluginPath())
	}
	if c2.c == nil || c2.c == c.c {
		t.Errorf("second client's handle %p, first %p", c2.c, c.c)
	}
	x := f32([]int64{2}, 1, 2)
	data := serialized(t, c2, addOneProgram)
	e := mustDeserialize(t, c, data)
	defer e.Close()
	if got := float32s(t, run(t, e, x)[0]); fmt.Sprint(got) != "[2 3]" {
		t.Errorf("deserialized into the first client: %v", got)
	}

	notPlugin := filepath.Join(t.TempDir(), "not-a-plugin.so")
	if err := os.WriteFile(notPlugin, []byte("text"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(notPlugin); err == nil || !strings.Contains(err.Error(), notPlugin) || !strings.Contains(err.Error(), "dlopen") {
		t.Errorf("Open(%s) = %v, want a dlopen error naming it", notPlugin, err)
	}
}

const addOneProgram = `module @add_one {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    %c = stablehlo.constant dense<1.0> : tensor<2xf32>
    %y = stablehlo.add %x, %c : tensor<2xf32>
    return %y : tensor<2xf32>
  }
}`

func TestSerializeChecks(t *testing.T) {
	// An UNIMPLEMENTED plugin error means "unsupported"; others do not.
	if err := (&pluginErr{code: 12, msg: "nope"}); !errors.Is(err, errors.ErrUnsupported) || err.Error() != "plugin error UNIMPLEMENTED: nope" {
		t.Errorf("UNIMPLEMENTED: %v", err)
	}
	if err := (&pluginErr{code: 13, msg: "bad"}); errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("INTERNAL: %v", err)
	}

	// Envelope round trip and compatibility.
	h := envelopeHeader{Platform: "cpu", PluginVersion: "0.81", PluginSize: 10, Host: "h", Name: "m", NumOutputs: 2,
		Params: []paramHeader{{DType: "float32", Shape: []int64{2, 3}}, {Unknown: true}, {DType: "bool"}}}
	d, err := marshalEnvelope(h, []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	h2, p, err := unmarshalEnvelope(d)
	if err != nil || string(p) != "payload" || !reflect.DeepEqual(h, h2) {
		t.Fatalf("round trip: %+v %q %v", h2, p, err)
	}
	params, err := h2.params()
	if err != nil || fmt.Sprint(params) != "[float32[2,3] ? bool[]]" {
		t.Errorf("params: %v %v", params, err)
	}
	for _, other := range []func(*envelopeHeader){
		func(h *envelopeHeader) { h.Platform = "cuda" },
		func(h *envelopeHeader) { h.PluginVersion = "0.82" },
		func(h *envelopeHeader) { h.PluginSize++ },
		func(h *envelopeHeader) { h.Host = "other" },
	} {
		o := h
		other(&o)
		if err := h.compatible(o); err == nil {
			t.Errorf("%+v accepted as compatible with %+v", o, h)
		}
	}
	if err := h.compatible(h); err != nil {
		t.Error(err)
	}
}
