// Package pjrt loads PJRT plugins (the XLA CPU plugin, JAX's CUDA plugin,
// libtpu), compiles StableHLO programs with them and runs the compiled
// programs on host tensors.
//
// It is a thin layer over github.com/gomlx/go-xla/pkg/pjrt that speaks
// xserve's types: tensors go in and out as tensor.Tensor (little-endian,
// row-major bytes), programs come in as StableHLO MLIR text (what the lowering
// package emits), and every error starts with "pjrt: ".
//
// Typical use:
//
//	path, err := pjrt.FindPlugin(pjrt.FindOptions{Path: flagValue})
//	client, err := pjrt.Open(path) // once per process
//	exe, err := client.Compile(ctx, stablehloText)
//	w, err := client.Upload(ctx, weights) // upload once, reuse for every call
//	outs, err := exe.Run(ctx, []*pjrt.Buffer{w, input})
//
// The CPU plugin is installed by `make pjrt` (scripts/pjrt-install.sh) into
// .cache/pjrt/, where FindPlugin looks for it.
//
// # Lifetimes
//
// Clients, Buffers and Executables hold plugin (C++) resources. Close them when
// done; Close is idempotent. Closing a Client closes its Executables and
// invalidates its Buffers: using either afterwards returns an error wrapping
// ErrClosed instead of crashing. The Client keeps every Executable it compiled
// until it is closed (so that they are destroyed before the client), hence
// Close executables you no longer need. Open a plugin once per process and
// share the Client; loading two copies of the same plugin from different paths
// into one process is not supported by XLA.
//
// # Concurrency
//
// All methods are safe for concurrent use. In particular one Executable may be
// executed from many goroutines at once, with the same argument Buffers: the
// plugin's execute call is thread-safe and arguments are never donated, so
// they stay valid after each call. Close waits for in-flight calls on the same
// object to finish.
//
// Client.RunHostAll runs several executions at once in one call into the
// plugin: the first on the calling thread, the others on worker threads the
// client keeps (native threads, one fewer than the CPUs, started on first
// use and stopped by Close), which spin briefly for the next execution
// before they sleep. serving splits a batch's rows across idle cores with it
// (serving/rowsplit.go); goroutines there cost a shard 20-40 µs to start and
// let the Go scheduler put both shards on one core now and then.
//
// go-xla recycles its C argument arenas in per-P free lists guarded by
// procPin, which the race detector cannot see through: run race tests with
// `go test -race -tags race_mu`, which makes go-xla add mutexes it can see.
//
// # Argument checking
//
// The CPU plugin checks only the byte size of each argument, so an int32[2,3]
// buffer passed where the program wants float32[2,3] would be silently
// reinterpreted. Compile therefore reads the parameter types from the @main
// signature of the StableHLO text and Execute checks every argument's dtype and
// shape against them (when the text can be parsed; otherwise only the plugin's
// checks apply).
//
// # Serialized executables
//
// Executable.Serialize and Client.Deserialize save and restore compiled
// executables (the plugin's machine code plus a checksummed header naming the
// plugin and CPU features), so a restarted server skips XLA compilation. go-xla
// v0.1.4 does not bind PJRT_Executable_Serialize/DeserializeAndLoad, so Open
// loads the plugin itself and gives go-xla (through its public
// RegisterPreloadedPlugin) a copy of the plugin's API table whose compile and
// client-create entries note the C handles xserve needs and load serialized
// executables (capi.go, capi_plugin.c); serialize.go calls the two functions
// with those handles. A plugin without them makes both return an error
// wrapping errors.ErrUnsupported. A cache directory holds native code: trust
// it as much as the plugin itself.
package pjrt
