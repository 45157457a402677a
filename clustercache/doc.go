// Package clustercache shares the compile cache between xserve replicas
// through a JetStream object store, so that a replica joining a cluster
// loads the executables another one compiled instead of compiling them.
//
//	js, _ := jetstream.New(nc)
//	store, err := clustercache.Open(ctx, clustercache.Options{JetStream: js, Replicas: 3})
//	local, _ := engine.OpenDirCache(dir)
//	cache := clustercache.NewTiered(local, store, clustercache.TieredOptions{})
//	defer cache.Close(ctx)
//	e, _ := engine.New(engine.Options{Client: client, Cache: cache})
//
// # Store
//
// A Store is an engine.Cache on one object store bucket (default
// "xserve_compile_cache"; a replication factor, a size bound and a TTL are
// options). Objects are named by the engine's cache keys, which already
// hold everything an entry depends on: the model's content, its symbol
// sizes, the lowering options and the server build for lowered StableHLO;
// the PJRT plugin, its version, the CPU features or device kind and the
// program's hash for executables. An entry made on another kind of machine
// is therefore a miss, never a wrong executable. Every object is sealed as
// the engine's directory cache seals its files (engine.SealEntry: a SHA-256
// of the payload in a header line); the object store's own digest is
// checked too. An object whose checksum fails is deleted and reported as
// engine.ErrCorruptEntry, so that the engine rebuilds it.
//
// # Tiered
//
// Tiered is the cache a replica hands to its engine: its local cache
// first, then the cluster's. A cluster hit is written to the local cache;
// a Put is written locally at once and published to the cluster in the
// background, usually within milliseconds (xserve_cluster_cache_publish_seconds
// measures it), so that the replicas compiling a new model share the work
// from the first bucket. Entries the local cache already held are published
// too when the cluster lacks them, so that a replica started from a baked
// cache fills an empty cluster. Lookups skip the cluster while the
// connection is down rather than wait for it; Flush waits for the pending
// publications (`xserve compile --publish` ends with it).
//
// The engine must not know about NATS: it takes any engine.Cache, and
// cmd/xserve wires a Tiered in when --cluster-cache is on.
package clustercache
