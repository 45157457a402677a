package httpapi

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	o := Options{MaxBodyBytes: -1, ReadTimeout: -1, CompressMinBytes: -2, ReadHeaderTimeout: -1, MinReadRate: -2, MaxConnsPerIP: -3}
	o.setDefaults()
	err := o.validate()
	for _, want := range []string{"Options.MaxBodyBytes is -1", "Options.ReadTimeout is -1ns", "Options.CompressMinBytes is -2",
		"Options.ReadHeaderTimeout is -1ns", "Options.MinReadRate is -2", "Options.MaxConnsPerIP is -3"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v, want it to contain %q", err, want)
		}
	}
	var def Options
	def.setDefaults()
	if err := def.validate(); err != nil {
		t.Fatal(err)
	}
	if def.MaxBodyBytes != 64<<20 || def.MaxDecompressedBytes != 64<<20 || def.MaxTensorElements != 1<<28 || def.MemoryBudget != 200<<20 || def.MaxConns != 4096 || def.IdleTimeout != 30*time.Second ||
		def.ReadHeaderTimeout != 10*time.Second || def.MinReadRate != 4096 || def.MaxConnsPerIP != 2048 {
		t.Errorf("defaults: %+v", def)
	}
	if _, err := New(&echoBackend{}, Options{MaxDecompressedBytes: -5}); err == nil || !strings.Contains(err.Error(), "MaxDecompressedBytes is -5") {
		t.Errorf("New with bad options: %v", err)
	}
}
