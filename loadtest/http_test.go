package loadtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"syscall"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// TestProtocolsRoundTrip sends every protocol with every compression and
// checks that the server decoded exactly the tensor sent, and that the
// (possibly compressed) response validated.
func TestProtocolsRoundTrip(t *testing.T) {
	img := tensor.FromFloat32s([]float32{0, 1.5, -2.25, 3e-8, 1e30, -0.1}, 2, 3)
	for _, proto := range []Protocol{ProtocolV1JSON, ProtocolV2JSON, ProtocolV2Binary} {
		for _, comp := range []string{"", "gzip", "zstd"} {
			for _, accept := range []string{"", "gzip", "zstd"} {
				t.Run(fmt.Sprintf("%s/request=%s/response=%s", proto, comp, accept), func(t *testing.T) {
					f := newFakeServer(t, 0)
					tg := newTarget(t, f, HTTPOptions{Protocol: proto, Compression: comp, AcceptEncoding: accept, ExpectOutputs: map[string][]int64{"probs": {2, 10}}})
					s := run(t, Options{Target: tg, Inputs: Samples{{"image": img}}, Concurrency: 1, MaxRequests: 3})
					if s.Successes != 3 {
						t.Fatalf("successes %d, failures %v; server errors %v", s.Successes, s.ErrorSamples, f.protocolErrors())
					}
					inputs, shapes := f.lastInputs()
					if fmt.Sprint(shapes["image"]) != "[2 3]" {
						t.Errorf("server got shape %v, want [2 3]", shapes["image"])
					}
					got := inputs["image"]
					for i, want := range img.Float64s() {
						if i >= len(got) || float32(got[i]) != float32(want) {
							t.Fatalf("server got %v, want %v", got, img.Float64s())
						}
					}
				})
			}
		}
	}
}

func TestEncodeDTypes(t *testing.T) {
	tg, err := NewHTTPTarget(context.Background(), HTTPOptions{URL: "http://127.0.0.1:1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	i64 := tensor.FromInt64s([]int64{-3, 1 << 40})
	b := tensor.New(tensor.Bool, 2)
	b.Data[1] = 1
	body, ct, _, err := tg.Encode(Sample{"ids": i64, "mask": b})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","inputs":{"ids":{"dtype":"int64","shape":[2],"data":[-3,1099511627776]},"mask":{"dtype":"bool","shape":[2],"data":[false,true]}}}`
	if string(body) != want || ct != "application/json" {
		t.Errorf("v1json body\n%s (%s)\nwant\n%s", body, ct, want)
	}
	nan := tensor.FromFloat32s([]float32{float32(math.NaN())})
	if _, _, _, err := tg.Encode(Sample{"x": nan}); !errors.Is(err, ErrInput) {
		t.Errorf("Encode(NaN) error %v, want ErrInput", err)
	}
}

func TestHTTPOptionsValidate(t *testing.T) {
	for name, o := range map[string]HTTPOptions{
		"no model":        {URL: "http://127.0.0.1:8080"},
		"bad protocol":    {URL: "http://127.0.0.1:8080", Model: "m", Protocol: "grpc"},
		"bad compression": {URL: "http://127.0.0.1:8080", Model: "m", Compression: "br"},
		"bad scheme":      {URL: "ftp://127.0.0.1:8080", Model: "m"},
		"no host":         {URL: "http://", Model: "m"},
	} {
		if _, err := NewHTTPTarget(context.Background(), o); !errors.Is(err, ErrOptions) {
			t.Errorf("%s: error %v, want ErrOptions", name, err)
		}
	}
}

func TestTargetURL(t *testing.T) {
	for _, tc := range []struct {
		base    string
		proto   Protocol
		version string
		want    string
	}{
		{"http://127.0.0.1:8080", ProtocolV1JSON, "", "http://127.0.0.1:8080/v1/infer"},
		{"http://127.0.0.1:8080/", ProtocolV2JSON, "", "http://127.0.0.1:8080/v2/models/m%2Fx/infer"},
		{"http://[::1]:9/prefix/", ProtocolV2Binary, "3", "http://[::1]:9/prefix/v2/models/m%2Fx/versions/3/infer"},
	} {
		tg, err := NewHTTPTarget(context.Background(), HTTPOptions{URL: tc.base, Model: "m/x", Protocol: tc.proto, Version: tc.version})
		if err != nil {
			t.Fatal(err)
		}
		if got := tg.URL(); got != tc.want {
			t.Errorf("%s %s: URL %s, want %s", tc.base, tc.proto, got, tc.want)
		}
		tg.Close()
	}
}

func TestFailureKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&StatusError{Protocol: "http", Code: 429}, "http 429"},
		{fmt.Errorf("x: %w", ErrInvalidResponse), "invalid response"},
		{context.DeadlineExceeded, "timeout"},
		{context.Canceled, "canceled"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "connection refused"},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), "connection reset"},
		{errors.New("something else"), "error"},
	} {
		if got := FailureKind(tc.err); got != tc.want {
			t.Errorf("FailureKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
