package serving

import (
	"context"
	"errors"
	"fmt"

	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
)

// ExecutableCache is the executable half of the server's compile cache (the
// same directory format, keys and checksums), for tools that compile one
// program at a time (package runner) instead of serving a model repository.
type ExecutableCache struct{ c blobCache }

// OpenExecutableCache returns the cache in dir, creating the directory.
func OpenExecutableCache(dir string) (*ExecutableCache, error) {
	c, err := newDirCache(dir)
	if err != nil {
		return nil, err
	}
	return &ExecutableCache{c: c}, nil
}

// Compile returns prog's executable on client c bound to w: deserialized from
// the cache when it holds one for c's target (cached true), or else compiled
// and stored. A corrupt entry, or one that does not deserialize, is deleted
// and compiled again; a plugin that cannot serialize is compiled for every
// time. Only a failing compile is an error.
func (ec *ExecutableCache) Compile(ctx context.Context, c *pjrt.Client, prog *lower.Program, w *Weights) (exe *Executable, cached bool, err error) {
	key := executableKey(c, prog)
	data, ok, gerr := ec.c.Get(key)
	if ok {
		pe, derr := c.Deserialize(ctx, data)
		if derr == nil {
			if exe, err := bind(ctx, c, pe, prog, w); err == nil {
				return exe, true, nil
			} else if ctx.Err() != nil {
				return nil, false, err
			}
		} else if !errUnsupported(derr) && ctx.Err() == nil {
			_ = ec.c.Delete(key) // rebuilt below
		}
	} else if gerr != nil && !errors.Is(gerr, errCorruptEntry) {
		return nil, false, fmt.Errorf("serving: compile cache: %w", gerr)
	}
	exe, err = Compile(ctx, c, prog, w)
	if err != nil {
		return nil, false, err
	}
	if data, err := exe.Serialize(); err == nil {
		if err := ec.c.Put(key, data); err != nil {
			_ = exe.Close()
			return nil, false, fmt.Errorf("serving: compile cache: store %s: %w", key, err)
		}
	}
	return exe, false, nil
}
