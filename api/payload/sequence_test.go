package payload

import (
	"errors"
	"strings"
	"testing"

	"github.com/xserve/xserve/serving"
)

// TestSequenceParams: Triton's sequence parameters in an OIP body, as
// tritonclient sends them (integer or string ids), and the bad ones.
func TestSequenceParams(t *testing.T) {
	const input = `"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]`
	for _, tc := range []struct {
		name, params string
		want         *serving.SequenceStep
		err          string
	}{
		{"none", `{}`, nil, ""},
		{"zero id", `{"sequence_id": 0}`, nil, ""},
		{"int start", `{"sequence_id": 42, "sequence_start": true}`, &serving.SequenceStep{ID: "42", Start: true}, ""},
		{"uint64 id", `{"sequence_id": 18446744073709551615, "sequence_end": true}`, &serving.SequenceStep{ID: "18446744073709551615", End: true}, ""},
		{"string id", `{"sequence_id": "stream-7", "sequence_start": false, "sequence_end": false}`, &serving.SequenceStep{ID: "stream-7"}, ""},
		{"empty string id", `{"sequence_id": ""}`, nil, ""},
		{"float id", `{"sequence_id": 1.5}`, nil, `parameters.sequence_id is "1.5", want an integer or a string`},
		{"negative id", `{"sequence_id": -3}`, nil, "want an integer or a string"},
		{"bool id", `{"sequence_id": true}`, nil, "want an integer or a string"},
		{"start without id", `{"sequence_start": true}`, nil, "sequence_start or sequence_end without a sequence_id"},
		{"bad flag", `{"sequence_id": 1, "sequence_end": "yes"}`, nil, "parameters.sequence_end"},
		{"long id", `{"sequence_id": "` + strings.Repeat("a", 300) + `"}`, nil, "300 bytes long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := DecodeOIP("m", 0, []byte(`{`+input+`, "parameters": `+tc.params+`}`), "", 1<<20)
			if tc.err != "" {
				if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want a bad request saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := d.Infer.Sequence
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Fatalf("sequence = %+v, want %+v", got, tc.want)
			}
		})
	}
}
