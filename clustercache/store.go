package clustercache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xserve/xserve/engine"
)

// Defaults of Options.
const (
	DefaultBucket     = "xserve_compile_cache"
	DefaultTimeout    = 30 * time.Second
	DefaultStartRetry = time.Minute
)

// Options configure a Store. The zero value of each optional field means its
// default.
type Options struct {
	// JetStream is the JetStream API of the connection the store uses
	// (required).
	JetStream jetstream.JetStream
	// Bucket is the object store's name (letters, digits, '-' and '_');
	// default "xserve_compile_cache".
	Bucket string
	// Replicas is the bucket's replication factor in a JetStream cluster
	// (3 keeps it through the loss of a node); default 1. An existing
	// bucket is updated to it.
	Replicas int
	// MaxBytes bounds the bucket's size; 0 means unbounded. A full bucket
	// refuses new entries (they stay in the replicas' local caches).
	MaxBytes int64
	// TTL drops entries that long after they were stored; 0 keeps them.
	TTL time.Duration
	// Timeout bounds one operation on the bucket; default 30s.
	Timeout time.Duration
	// StartRetry is how long Open keeps trying, with backoff, while
	// JetStream says it is temporarily unavailable (503: a meta leader
	// election, a cluster without quorum) or does not answer in time;
	// default 1 minute, negative: one try.
	StartRetry time.Duration
	// Logger receives the store's warnings; nil means slog.Default().
	Logger *slog.Logger
}

var bucketRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

func (o *Options) setDefaults() {
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.StartRetry == 0 {
		o.StartRetry = DefaultStartRetry
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

func (o *Options) validate() error {
	var errs []error
	if o.JetStream == nil {
		errs = append(errs, errors.New("clustercache: Options.JetStream is required"))
	}
	if !bucketRE.MatchString(o.Bucket) {
		errs = append(errs, fmt.Errorf("clustercache: Options.Bucket is %q, want letters, digits, '-' and '_'", o.Bucket))
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		errs = append(errs, fmt.Errorf("clustercache: Options.Replicas is %d, want 1 to 5", o.Replicas))
	}
	if o.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("clustercache: Options.MaxBytes is %d, want 0 (unbounded) or more", o.MaxBytes))
	}
	if o.TTL < 0 || o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("clustercache: Options.TTL (%v) and Timeout (%v) must not be negative", o.TTL, o.Timeout))
	}
	return errors.Join(errs...)
}

// Store is an engine.Cache kept in a JetStream object store that replicas
// share. Its methods are safe for concurrent use; each is bounded by
// Options.Timeout.
type Store struct {
	obs  jetstream.ObjectStore
	nc   *nats.Conn
	opts Options
}

var _ engine.Cache = (*Store)(nil)

// Open creates the bucket (or updates it to opts) and returns the store on
// it. A user that may not create streams binds to the bucket as it is, when
// an operator made it. While JetStream is temporarily unavailable it
// retries, with backoff, for Options.StartRetry (a replica started during
// a NATS node's restart waits for the cluster instead of failing).
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(opts.StartRetry)
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		obs, err := opts.open(ctx)
		if err == nil {
			return &Store{obs: obs, nc: opts.JetStream.Conn(), opts: opts}, nil
		}
		if !unavailable(err) || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return nil, err
		}
		opts.Logger.Warn("cluster compile cache: JetStream unavailable; retrying", "bucket", opts.Bucket, "in", wait, "error", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("clustercache: open %s: %w (last error: %w)", opts.Bucket, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// unavailable reports whether a JetStream API error may pass: the API says
// it is temporarily unavailable (503, other than JetStream not being
// enabled at all), or nothing answered in time.
func unavailable(err error) bool {
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.Code == 503
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// open makes one try at creating or binding the bucket.
func (opts *Options) open(ctx context.Context) (jetstream.ObjectStore, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	obs, err := opts.JetStream.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      opts.Bucket,
		Description: "xserve compile cache: lowered StableHLO and compiled executables, by cache key (docs/NATS.md)",
		Replicas:    opts.Replicas,
		MaxBytes:    opts.MaxBytes,
		TTL:         opts.TTL,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		bound, berr := opts.JetStream.ObjectStore(ctx, opts.Bucket)
		if berr != nil {
			return nil, fmt.Errorf("clustercache: create or update object store %s (%d replicas): %w (is JetStream enabled on the NATS server, and may this user create streams?)", opts.Bucket, opts.Replicas, err)
		}
		opts.Logger.Warn("cluster compile cache: cannot update the bucket's configuration; using it as it is", "bucket", opts.Bucket, "error", err)
		obs = bound
	}
	return obs, nil
}

// Bucket returns the object store's name.
func (s *Store) Bucket() string { return s.opts.Bucket }

// Connected reports whether the store's NATS connection is up: while it is
// not, Tiered does not wait for the cluster.
func (s *Store) Connected() bool { return s.nc == nil || s.nc.IsConnected() }

func (s *Store) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opts.Timeout)
}

func checkKey(key string) error {
	if !engine.ValidKey(key) {
		return fmt.Errorf("clustercache: invalid key %q", key)
	}
	return nil
}

// Get reads the entry of key. A missing one is a miss (ok false, nil
// error); one whose checksum fails is deleted and reported as a miss with
// an error wrapping engine.ErrCorruptEntry.
func (s *Store) Get(key string) ([]byte, bool, error) {
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	ctx, cancel := s.context()
	defer cancel()
	data, err := s.obs.GetBytes(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return nil, false, nil
	case errors.Is(err, jetstream.ErrDigestMismatch):
		return nil, false, s.corrupt(key, err)
	case err != nil:
		return nil, false, fmt.Errorf("clustercache: get %s from bucket %s: %w", key, s.opts.Bucket, err)
	}
	payload, err := engine.OpenEntry(data)
	if err != nil {
		return nil, false, s.corrupt(key, err)
	}
	return payload, true, nil
}

// corrupt deletes the damaged entry of key and returns the error Get
// reports for it.
func (s *Store) corrupt(key string, cause error) error {
	if err := s.Delete(key); err != nil {
		return fmt.Errorf("%w %s in bucket %s (%v), and cannot delete it: %v", engine.ErrCorruptEntry, key, s.opts.Bucket, cause, err)
	}
	return fmt.Errorf("%w %s in bucket %s (%v); deleted", engine.ErrCorruptEntry, key, s.opts.Bucket, cause)
}

// Put stores data as the entry of key, sealed with its checksum. A reader
// sees the old entry or the new one whole: the object store switches to
// the new chunks only once they are all stored.
func (s *Store) Put(key string, data []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	ctx, cancel := s.context()
	defer cancel()
	if _, err := s.obs.PutBytes(ctx, key, engine.SealEntry(data)); err != nil {
		return fmt.Errorf("clustercache: put %s (%d bytes) into bucket %s: %w", key, len(data), s.opts.Bucket, err)
	}
	return nil
}

// Has reports whether the bucket holds an entry for key (without reading
// it).
func (s *Store) Has(key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	ctx, cancel := s.context()
	defer cancel()
	_, err := s.obs.GetInfo(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("clustercache: look up %s in bucket %s: %w", key, s.opts.Bucket, err)
	}
	return true, nil
}

// Delete removes the entry of key; deleting a missing entry is not an
// error.
func (s *Store) Delete(key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	ctx, cancel := s.context()
	defer cancel()
	if err := s.obs.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("clustercache: delete %s from bucket %s: %w", key, s.opts.Bucket, err)
	}
	return nil
}

// Keys lists the keys the bucket holds, sorted.
func (s *Store) Keys(ctx context.Context) ([]string, error) {
	infos, err := s.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("clustercache: list bucket %s: %w", s.opts.Bucket, err)
	}
	keys := make([]string, 0, len(infos))
	for _, in := range infos {
		keys = append(keys, in.Name)
	}
	slices.Sort(keys)
	return keys, nil
}

// String describes the store, e.g. "object store xserve_compile_cache (R3)".
func (s *Store) String() string {
	return fmt.Sprintf("object store %s (R%d)", s.opts.Bucket, s.opts.Replicas)
}
