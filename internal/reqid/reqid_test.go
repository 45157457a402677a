package reqid

import (
	"strings"
	"testing"
)

func TestFrom(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct{ xrid, tp, want string }{
		{"abc-123", tp, "abc-123"},
		{"", tp, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"has space", tp, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{strings.Repeat("x", MaxLen+1), "", ""},
		{"", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"", "garbage", ""},
	} {
		got := From(tc.xrid, tc.tp)
		if tc.want != "" && got != tc.want {
			t.Errorf("From(%q, %q) = %q, want %q", tc.xrid, tc.tp, got, tc.want)
		}
		if tc.want == "" && (len(got) != 32 || got == From(tc.xrid, tc.tp)) {
			t.Errorf("From(%q, %q) = %q, want a fresh 32-digit id", tc.xrid, tc.tp, got)
		}
	}
}
