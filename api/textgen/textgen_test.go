package textgen

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStopHoldBack: streamed text is released only once no stop string can
// still begin in it, and ends before the first stop string.
func TestStopHoldBack(t *testing.T) {
	for _, c := range []struct {
		name   string
		stops  []string
		deltas []string
		sent   string // released before the end
		final  string
	}{
		{"no stops", nil, []string{"ab", "cd"}, "abcd", "abcd"},
		{"stop inside a delta", []string{"c"}, []string{"ab", "xcy"}, "abx", "abx"},
		{"stop across deltas", []string{"END"}, []string{"hello E", "N", "D more"}, "hello ", "hello "},
		{"the last len(stop)-1 bytes are held", []string{"END"}, []string{"say EN", "ough"}, "say ENou", "say ENough"},
		{"held back until the end", []string{"###"}, []string{"x #", "#"}, "x ", "x ##"},
		{"earliest of two stops", []string{"zz", "b"}, []string{"aab", "zz"}, "aa", "aa"},
		{"multibyte characters are not split", []string{"ß!"}, []string{"Grüße"}, "Grü", "Grüße"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := &output{stops: c.stops}
			var sent strings.Builder
			for _, d := range c.deltas {
				o.held += d
				o.cut(false)
				sent.WriteString(o.take(false))
			}
			if sent.String() != c.sent {
				t.Errorf("released %q while streaming, want %q", sent.String(), c.sent)
			}
			o.cut(true)
			sent.WriteString(o.take(true))
			if sent.String() != c.final {
				t.Errorf("the whole text is %q, want %q", sent.String(), c.final)
			}
		})
	}
}

func TestParseStop(t *testing.T) {
	for _, c := range []struct {
		raw     string
		want    []string
		invalid bool
	}{
		{`null`, nil, false},
		{`"x"`, []string{"x"}, false},
		{`["a", "", "b"]`, []string{"a", "b"}, false},
		{`["1", "2", "3", "4", "5"]`, nil, true},
		{`7`, nil, true},
	} {
		got, err := ParseStop(json.RawMessage(c.raw))
		if (err != nil) != c.invalid || strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("ParseStop(%s) = %q, %v", c.raw, got, err)
		}
	}
}
