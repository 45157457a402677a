package payload

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/xserve/xserve/serving"
)

func TestBudget(t *testing.T) {
	b, err := NewBudget(1000)
	if err != nil {
		t.Fatal(err)
	}
	l1, l2 := b.Lease(), b.Lease()
	if err := l1.Reserve(600, "a"); err != nil {
		t.Fatal(err)
	}
	if err := l2.Reserve(500, "b"); !errors.Is(err, ErrBudget) || Status(err) != 429 {
		t.Errorf("over the budget now: %v (status %d), want ErrBudget, 429", err, Status(err))
	}
	if err := l2.Reserve(1001, "c"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the whole budget: %v, want ErrTooLarge", err)
	}
	l1.Release()
	if err := l2.Reserve(500, "b"); err != nil || b.Used() != 500 {
		t.Errorf("after a release: %v, used %d", err, b.Used())
	}
	l2.Release()
	l2.Release()
	if b.Used() != 0 {
		t.Errorf("used %d after releasing everything", b.Used())
	}
	var none *Lease
	if err := none.Reserve(1<<40, "x"); err != nil {
		t.Errorf("a nil lease reserves nothing: %v", err)
	}
}

func TestReadAll(t *testing.T) {
	b, _ := NewBudget(8 << 20)
	data := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB: small and large chunks
	l := b.Lease()
	got, err := ReadAll(bytes.NewReader(data), 4<<20, l, "body")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadAll: %v, %d bytes", err, len(got))
	}
	if l.Held() != int64(len(data)) {
		t.Errorf("lease holds %d, want the result's %d (the chunks given back)", l.Held(), len(data))
	}
	l.Release()
	if _, err := ReadAll(bytes.NewReader(data), 1<<20, b.Lease(), "body"); !errors.Is(err, ErrOverLimit) {
		t.Errorf("over the limit: %v", err)
	}
	small, _ := NewBudget(2 << 20)
	if _, err := ReadAll(bytes.NewReader(data), 4<<20, small.Lease(), "body"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the budget: %v", err)
	}
	if b.Used() != 0 || small.Used() != 0 {
		t.Errorf("failed reads left %d and %d reserved", b.Used(), small.Used())
	}
}

func TestStatusOfModelControl(t *testing.T) {
	if code := Status(fmt.Errorf("%w: cannot unload", serving.ErrModelControl)); code != 400 {
		t.Errorf("ErrModelControl maps to %d, want 400 (as Triton answers a load in poll mode)", code)
	}
}

// TestDefaultBudgetFitsTheLargestRequest: the default budget holds one
// request at the default limits' maximum: a 64 MiB body that decompresses
// to 64 MiB (in chunks, then joined) whose JSON becomes a 64 MiB tensor.
func TestDefaultBudgetFitsTheLargestRequest(t *testing.T) {
	b, err := NewBudget(DefaultMemoryBudget)
	if err != nil {
		t.Fatal(err)
	}
	l := b.Lease()
	defer l.Release()
	const limit = 64 << 20
	if err := l.Reserve(limit, "the body"); err != nil {
		t.Fatal(err)
	}
	out, err := ReadAll(bytes.NewReader(make([]byte, limit)), limit, l, "the body decompressed")
	if err != nil || len(out) != limit {
		t.Fatalf("decompressed: %d bytes, %v", len(out), err)
	}
	if err := l.Reserve(limit, "a tensor"); err != nil {
		t.Fatal(err)
	}
}

// TestHold: a hold counts against the budget without being refused (the
// bytes exist already), has the leases after it refused while it is large,
// and gives back what it no longer holds.
func TestHold(t *testing.T) {
	b, err := NewBudget(1000)
	if err != nil {
		t.Fatal(err)
	}
	h, l := b.Hold(), b.Lease()
	for _, step := range []struct {
		hold, reserve int64
		fits          bool
		used          int64 // after the step
	}{
		{hold: 1500, reserve: 1, fits: false, used: 1500}, // past the budget: held all the same
		{hold: 700, reserve: 300, fits: true, used: 1000},
		{hold: 800, reserve: 1, fits: false, used: 1100},
		{hold: 0, reserve: 700, fits: true, used: 1000},
		{hold: -5, reserve: 0, fits: true, used: 1000}, // a negative hold holds nothing
	} {
		h.Set(step.hold)
		err := l.Reserve(step.reserve, "a body")
		if (err == nil) != step.fits || (err != nil && !errors.Is(err, ErrBudget)) {
			t.Errorf("hold %d, reserve %d: %v, want fits=%v", step.hold, step.reserve, err, step.fits)
		}
		if b.Used() != step.used {
			t.Errorf("hold %d, reserve %d: used %d, want %d", step.hold, step.reserve, b.Used(), step.used)
		}
	}
	l.Release()
	if b.Used() != 0 || h.Held() != 0 {
		t.Errorf("used %d, held %d after the lease's release with nothing held", b.Used(), h.Held())
	}
	var none *Hold
	none.Set(1 << 40)
	if none.Held() != 0 {
		t.Error("a nil hold holds nothing")
	}
}
