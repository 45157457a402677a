package serving

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/xserve/xserve/fxgraph"
)

// TestHostErrorKinds: a host node's failure (the request's text) is a bad
// request; the device part's errors keep their kind.
func TestHostErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		err        error
		invalid    bool
		overloaded bool
	}{
		{fmt.Errorf("%w x (xserve.string_parse): not a number", fxgraph.ErrHostNode), true, false},
		{fmt.Errorf("device: %w", ErrOverloaded), false, true},
		{context.Canceled, false, false},
	} {
		got := hostError(tc.err)
		if errors.Is(got, ErrInvalidInput) != tc.invalid || errors.Is(got, ErrOverloaded) != tc.overloaded {
			t.Errorf("hostError(%v) = %v", tc.err, got)
		}
	}
}
