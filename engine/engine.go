package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/platforms"
	"github.com/xserve/xserve/pjrt"
)

// Options configure an Engine. The zero value of each optional field means
// its default.
type Options struct {
	// Client compiles and runs the programs (required). The Engine does not
	// close it.
	Client *pjrt.Client
	// Lowering configures lowering; Platform and Kernels default to the
	// client's.
	Lowering lower.Options
	// Lowerer, if set, is used as is instead of one made from Lowering.
	Lowerer *lower.Lowerer
	// CacheDir is the on-disk compile cache: lowered StableHLO (for models
	// loaded from a file) and, where the plugin can serialize them,
	// compiled executables, kept across restarts; "" means none.
	CacheDir string
	// Cache, if set, is the compile cache instead of a directory (one that
	// replicas share, say).
	Cache Cache
	// Logger receives compile-cache warnings; nil means slog.Default().
	Logger *slog.Logger
	// Cores is how many executions run at once without sharing a CPU core
	// (what Load.Cores says); 0 means runtime.GOMAXPROCS.
	Cores int
}

// Engine compiles models' programs on one PJRT client and runs them. All its
// methods are safe for concurrent use.
type Engine struct {
	client  *pjrt.Client
	lowerer *lower.Lowerer
	cache   Cache // nil without one
	buildID string
	log     *slog.Logger

	unsupportedOnce sync.Once // logs that executables cannot be cached

	// lowerings and compiles count Lower and Compile calls.
	lowerings, compiles atomic.Int64

	// executing counts the executions running, each part of a split one
	// counted (Begin); cores is how many run at once without sharing a
	// core (GOMAXPROCS).
	executing atomic.Int64
	cores     int
	cpu       bool // the client's platform is the CPU: only there do executions split
	kernels   bool // the client loaded the CPU kernel library, whose threads an execution can go without

	rows rowPrograms // Concat's and Split's programs
}

// New returns an Engine on opts.Client.
func New(opts Options) (*Engine, error) {
	c := opts.Client
	if c == nil {
		return nil, errors.New("engine: Options.Client is required")
	}
	e := &Engine{
		client:  c,
		lowerer: opts.Lowerer,
		buildID: buildID(),
		log:     opts.Logger,
		cores:   opts.Cores,
		cpu:     c.Platform() == "cpu",
		kernels: c.KernelsFile() != "",
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.cores <= 0 {
		e.cores = runtime.GOMAXPROCS(0)
	}
	if e.lowerer == nil {
		lo := opts.Lowering
		if lo.Platform == "" {
			lo.Platform = c.Platform()
		}
		if lo.Kernels == nil {
			lo.Kernels = c.Kernels()
		}
		e.lowerer = platforms.New(lo)
	}
	if opts.Cache != nil {
		e.cache = opts.Cache
	} else if opts.CacheDir != "" {
		cache, err := OpenDirCache(opts.CacheDir)
		if err != nil {
			return nil, err
		}
		e.cache = cache
	}
	return e, nil
}

// Client returns the engine's PJRT client.
func (e *Engine) Client() *pjrt.Client { return e.client }

// Lowerer returns the engine's lowerer.
func (e *Engine) Lowerer() *lower.Lowerer { return e.lowerer }

// Counts are the lowerings and compilations an Engine made (what its caches
// did not save).
type Counts struct {
	Lowerings, Compiles int64
}

// Counts returns how many programs the engine lowered and compiled.
func (e *Engine) Counts() Counts {
	return Counts{Lowerings: e.lowerings.Load(), Compiles: e.compiles.Load()}
}

// unsupported logs a failure to serialize or deserialize an executable: at
// debug level once when the plugin cannot, as a warning otherwise.
func (e *Engine) unsupported(log *slog.Logger, err error, msg string) {
	if errors.Is(err, errors.ErrUnsupported) {
		e.unsupportedOnce.Do(func() { log.Debug(msg, "error", err) })
		return
	}
	log.Warn(strings.Replace(msg, "cannot", "failed to", 1), "error", err)
}

// String describes the engine, e.g. "engine on pjrt cpu (api 0.81) /path".
func (e *Engine) String() string { return fmt.Sprintf("engine on %s", e.client) }
