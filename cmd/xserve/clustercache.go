package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xserve/xserve/clustercache"
	"github.com/xserve/xserve/engine"
)

// clusterCacheFlags are the flags of the cluster compile cache, shared by
// `xserve serve` (--cluster-cache) and `xserve compile` (--publish).
type clusterCacheFlags struct {
	bucket   *string
	replicas *int
	maxBytes int64
	ttl      *time.Duration
}

func addClusterCacheFlags(fs *flag.FlagSet) *clusterCacheFlags {
	f := &clusterCacheFlags{
		bucket:   fs.String("cluster-cache-bucket", clustercache.DefaultBucket, "JetStream object store of the cluster compile cache (letters, digits, '-' and '_')"),
		replicas: fs.Int("cluster-cache-replicas", 1, "replication factor of the cluster compile cache's bucket in a JetStream cluster (3 survives the loss of a node)"),
		ttl:      fs.Duration("cluster-cache-ttl", 0, "drop cluster compile cache entries this long after they were stored (0: keep them)"),
	}
	fs.Var(byteSize{&f.maxBytes}, "cluster-cache-max-bytes", "bound on the cluster compile cache's bucket, e.g. 20GiB (default unbounded; a full bucket refuses new entries)")
	return f
}

// clusterCache is an open cluster compile cache: the engine's cache (the
// local directory, then the object store) and its own NATS connection.
// Its methods are no-ops on nil (no cluster cache).
type clusterCache struct {
	*clustercache.Tiered
	nc *nats.Conn
}

// open opens the bucket on nc, which the cache then owns, behind the local
// cache in localDir ("" for none).
func (f *clusterCacheFlags) open(ctx context.Context, nc *nats.Conn, localDir string, log *slog.Logger) (*clusterCache, error) {
	fail := func(err error) (*clusterCache, error) {
		nc.Close()
		return nil, fmt.Errorf("cluster compile cache: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	store, err := clustercache.Open(ctx, clustercache.Options{
		JetStream: js,
		Bucket:    *f.bucket,
		Replicas:  *f.replicas,
		MaxBytes:  f.maxBytes,
		TTL:       *f.ttl,
		Logger:    log,
	})
	if err != nil {
		return fail(err)
	}
	var local engine.Cache
	if localDir != "" {
		if local, err = engine.OpenDirCache(localDir); err != nil {
			return fail(err)
		}
	}
	t := clustercache.NewTiered(local, store, clustercache.TieredOptions{Logger: log})
	log.Info("cluster compile cache", "cache", t.String(), "local", localDir)
	return &clusterCache{Tiered: t, nc: nc}, nil
}

// cache returns the engine's compile cache, nil without a cluster cache.
func (c *clusterCache) cache() engine.Cache {
	if c == nil {
		return nil
	}
	return c.Tiered
}

// close publishes what is pending, until ctx ends, and closes the
// connection.
func (c *clusterCache) close(ctx context.Context) error {
	if c == nil {
		return nil
	}
	err := c.Tiered.Close(ctx)
	c.nc.Close()
	if err != nil {
		return fmt.Errorf("cluster compile cache: %w", err)
	}
	return nil
}

// writeMetrics writes the cluster cache's metrics.
func (c *clusterCache) writeMetrics(w io.Writer) error {
	if c == nil {
		return nil
	}
	return c.WriteMetrics(w)
}

// errClusterCacheNeedsNATS is the error of --cluster-cache with NATS off.
var errClusterCacheNeedsNATS = errors.New("serve: --cluster-cache needs NATS with JetStream: the embedded server (drop --nats=false) or a cluster (--nats-url)")

// report waits up to timeout for the publications and prints what they
// did (`xserve compile --publish`); entries that could not be published
// are an error. Nil (no cluster cache) reports nothing.
func (c *clusterCache) report(w io.Writer, timeout time.Duration) error {
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := c.Flush(ctx)
	n := c.Counts()
	mean := time.Duration(0)
	if n.Published > 0 {
		mean = time.Duration(n.PublishSeconds / float64(n.Published) * float64(time.Second))
	}
	fmt.Fprintf(w, "cluster compile cache %s: %d entries published, %d were there already, %d failed, %d dropped, %d read from it; each published %s after it was built (mean)\n",
		c.Store(), n.Published, n.Present, n.Failed, n.Dropped, n.Hits, mean.Round(time.Millisecond))
	if err == nil && n.Failed+n.Dropped > 0 {
		err = fmt.Errorf("%d entries could not be published", n.Failed+n.Dropped)
	}
	if err != nil {
		return fmt.Errorf("compile: cluster compile cache: %w", err)
	}
	return nil
}
