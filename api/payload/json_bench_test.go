package payload

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// benchFloats are 3072 float32 values (a 3x32x32 image) written the way
// Python clients write them (json.dumps of numpy's tolist(): the shortest
// float64 repr of each float32).
func benchFloats() ([]float64, *tensor.Tensor) {
	r := rand.New(rand.NewPCG(1, 2))
	vals := make([]float64, 3*32*32)
	f32 := make([]float32, len(vals))
	for i := range vals {
		f32[i] = float32(r.NormFloat64())
		vals[i] = float64(f32[i])
	}
	return vals, tensor.FromFloat32s(f32)
}

// BenchmarkDecodeJSON decodes a request holding one float32[1,3,32,32]
// tensor as JSON, in the v2 (Open Inference Protocol) and /v1/infer forms.
// Compare against the code before the single-pass decoder by running the
// same file at that commit (see docs/BENCHMARKS.md):
//
//	go test -run '^$' -bench 'DecodeJSON|EncodeJSON' -count 6 ./api/payload
func BenchmarkDecodeJSON(b *testing.B) {
	vals, _ := benchFloats()
	v2, err := json.Marshal(map[string]any{
		"id":     "1",
		"inputs": []any{map[string]any{"name": "image", "shape": []int{1, 3, 32, 32}, "datatype": "FP32", "data": vals}},
	})
	if err != nil {
		b.Fatal(err)
	}
	v1, err := json.Marshal(map[string]any{
		"model":  "m",
		"inputs": map[string]any{"image": map[string]any{"dtype": "float32", "shape": []int{1, 3, 32, 32}, "data": vals}},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("v2", func(b *testing.B) {
		b.SetBytes(int64(len(v2)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeOIP("m", 0, v2, "", 1<<20); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("v1", func(b *testing.B) {
		b.SetBytes(int64(len(v1)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeV1(v1, "", "", 1<<20); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncodeJSON encodes a response holding one float32[1,3,32,32]
// output as JSON (v2 and /v1/infer).
func BenchmarkEncodeJSON(b *testing.B) {
	_, t := benchFloats()
	t.Shape = []int64{1, 3, 32, 32}
	resp := &serving.InferResponse{ModelName: "m", ModelVersion: 1, Outputs: []serving.NamedTensor{{Name: "y", Tensor: t}}}
	d := &Request{Model: "m", binaryOut: map[string]bool{}}
	b.Run("v2", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeOIP(d, resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("v1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeV1(d, resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}
