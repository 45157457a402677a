package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// Cache stores build artifacts (lowered StableHLO programs, serialized
// executables) by key: a directory (DirCache), or a store that replicas
// share. Keys are lower-case hex digests with an extension
// naming the kind (".stablehlo", ".pjrt"). Get reports a miss as ok false
// with a nil error; an entry that exists but cannot be read is an error, and
// callers treat it as a miss. An entry whose checksum does not match its
// content is deleted by Get, which reports it as a miss with an error
// wrapping ErrCorruptEntry, so that the caller rebuilds it. Put replaces an
// entry atomically: a concurrent Get sees the old entry, the new one or
// none, never a partial one. Delete removes an entry that was read intact but
// proved unusable (a StableHLO program that does not compile); deleting a
// missing entry is not an error. Implementations are safe for concurrent use.
type Cache interface {
	Get(key string) (data []byte, ok bool, err error)
	Put(key string, data []byte) error
	Delete(key string) error
}

// ErrCorruptEntry is wrapped by the error of a Get that found an entry whose
// checksum does not match (and deleted it).
var ErrCorruptEntry = errors.New("engine: compile cache: corrupt entry")

var cacheKeyRE = regexp.MustCompile(`^[0-9a-f]{64}\.(stablehlo|pjrt)$`)

// ValidKey reports whether key has the form of a cache key: 64 lower-case
// hex digits, then ".stablehlo" or ".pjrt".
func ValidKey(key string) bool { return cacheKeyRE.MatchString(key) }

// DirCache is a Cache keeping each entry in a file <dir>/<key>: a header
// line "xserve-cache sha256=<hex of the payload> size=<bytes>\n", then the
// payload.
type DirCache struct{ dir string }

const entryMagic = "xserve-cache"

// SealEntry prefixes data with its checksum header: the form in which every
// Cache implementation stores an entry, so that a damaged one is found.
func SealEntry(data []byte) []byte {
	sum := sha256.Sum256(data)
	head := fmt.Sprintf("%s sha256=%s size=%d\n", entryMagic, hex.EncodeToString(sum[:]), len(data))
	return append([]byte(head), data...)
}

// OpenEntry checks a sealed entry's header against its payload and returns
// the payload; a mismatch is an error saying what differs.
func OpenEntry(entry []byte) ([]byte, error) {
	nl := bytes.IndexByte(entry, '\n')
	if nl < 0 || nl > 200 {
		return nil, errors.New("no checksum header")
	}
	var sum string
	var size int
	if n, err := fmt.Sscanf(string(entry[:nl]), entryMagic+" sha256=%64s size=%d", &sum, &size); n != 2 || err != nil {
		return nil, fmt.Errorf("bad checksum header %q", entry[:nl])
	}
	data := entry[nl+1:]
	if len(data) != size {
		return nil, fmt.Errorf("payload is %d bytes, the header says %d", len(data), size)
	}
	got := sha256.Sum256(data)
	if hex.EncodeToString(got[:]) != sum {
		return nil, fmt.Errorf("payload sha256 is %x, the header says %s", got, sum)
	}
	return data, nil
}

// OpenDirCache returns the cache in dir, creating the directory.
func OpenDirCache(dir string) (*DirCache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine: compile cache: %w", err)
	}
	return &DirCache{dir: dir}, nil
}

func (c *DirCache) path(key string) (string, error) {
	if !cacheKeyRE.MatchString(key) {
		return "", fmt.Errorf("engine: compile cache: invalid key %q", key)
	}
	return filepath.Join(c.dir, key), nil
}

// Get reads the entry of key.
func (c *DirCache) Get(key string) ([]byte, bool, error) {
	p, err := c.path(key)
	if err != nil {
		return nil, false, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("engine: compile cache: %w", err)
	}
	payload, err := OpenEntry(data)
	if err != nil {
		if rmErr := os.Remove(p); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			return nil, false, fmt.Errorf("%w %s (%v), and cannot delete it: %v", ErrCorruptEntry, key, err, rmErr)
		}
		return nil, false, fmt.Errorf("%w %s (%v); deleted", ErrCorruptEntry, key, err)
	}
	return payload, true, nil
}

// Delete removes the entry of key.
func (c *DirCache) Delete(key string) error {
	p, err := c.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("engine: compile cache: %w", err)
	}
	return nil
}

// Put writes the entry of key to a temporary file in the cache directory,
// syncs it and renames it into place.
func (c *DirCache) Put(key string, data []byte) (err error) {
	p, err := c.path(key)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(c.dir, ".tmp-"+key+"-*")
	if err != nil {
		return fmt.Errorf("engine: compile cache: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("engine: compile cache: write %s: %w", p, err)
		}
	}()
	if _, err = f.Write(SealEntry(data)); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

// cacheFormat versions the encoding of cache keys and entries; bump it when
// either changes. 3: entries carry a checksum header.
const cacheFormat = 3

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		io.WriteString(h, p)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// programKey is the cache key of the StableHLO lowered from a model (its
// version directory's content hash) for one bucket with the given lowering
// options, by this build of the server.
func programKey(build, modelHash string, modelDims map[string]int64, opts lower.Options) string {
	dims := make([]string, 0, len(modelDims))
	for _, k := range slices.Sorted(maps.Keys(modelDims)) {
		dims = append(dims, fmt.Sprintf("%s=%d", k, modelDims[k]))
	}
	half := opts.HalfInF32 != nil && *opts.HalfInF32
	hwio := opts.ConvWeightsHWIO != nil && *opts.ConvWeightsHWIO
	depthwise := opts.DepthwiseMulAdd != nil && *opts.DepthwiseMulAdd
	asDot := opts.ConvAsDot != nil && *opts.ConvAsDot
	kernels := slices.Sorted(slices.Values(opts.Kernels))
	o := fmt.Sprintf("platform=%s narrow_int64=%t half_in_f32=%t conv_weights_hwio=%t depthwise_mul_add=%t conv_as_dot=%t keep_batch_norm=%t default_precision=%t inline_constant_max=%d max_fold_elements=%d module=%s kernels=%s",
		opts.Platform, opts.NarrowInt64, half, hwio, depthwise, asDot, opts.KeepBatchNorm, opts.DefaultPrecision, opts.InlineConstantMax, opts.MaxFoldElements, opts.ModuleName, strings.Join(kernels, ","))
	return digest("xserve stablehlo", fmt.Sprint(cacheFormat), build, modelHash, strings.Join(dims, ","), o) + ".stablehlo"
}

// executableKey is the cache key of prog compiled by the client's plugin
// for its target (plugin version, CPU features, device kind): an entry made
// on another kind of machine is a miss, compiled again, never loaded.
func executableKey(c *pjrt.Client, prog *lower.Program) string {
	return digest("xserve executable", fmt.Sprint(cacheFormat), c.PluginPath(), c.Target(), prog.Hash()) + ".pjrt"
}

// buildID identifies this build of the server, so that a new build (whose
// lowering rules may differ) does not reuse StableHLO lowered by an old one:
// the module version and VCS revision, plus, for builds from a modified or
// unknown tree, the executable's size and modification time.
func buildID() string {
	var parts []string
	exact := false
	if bi, ok := debug.ReadBuildInfo(); ok {
		parts = append(parts, bi.GoVersion, bi.Main.Path, bi.Main.Version)
		modified := true
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				parts = append(parts, s.Value)
				exact = true
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		exact = exact && !modified
	}
	if !exact {
		if exe, err := os.Executable(); err == nil {
			if fi, err := os.Stat(exe); err == nil {
				parts = append(parts, exe, fmt.Sprint(fi.Size()), fi.ModTime().UTC().String())
			}
		}
	}
	return strings.Join(parts, " ")
}

// hashVersionDir returns the hex SHA-256 of the regular files in a version
// directory (the model file and what sits beside it, such as ONNX external
// data), names included, in name order. Names starting with "." are skipped,
// as the repository does.
func hashVersionDir(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("engine: hash model: %w", err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	h := sha256.New()
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return "", fmt.Errorf("engine: hash model: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, fi.Size())
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("engine: hash model: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// cachedProgram is the encoding of a lower.Program in the StableHLO cache:
// everything but the weights' values, which come from the model's graph.
type cachedProgram struct {
	Format  int              `json:"format"`
	Dims    map[string]int64 `json:"dims"`
	Params  []cachedTensor   `json:"params"`
	Outputs []cachedTensor   `json:"outputs"`
	Module  string           `json:"module"`
}

type cachedTensor struct {
	Name   string  `json:"name"`
	Weight bool    `json:"weight,omitempty"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	// Perm is lower.Param.Perm: the weight is stored transposed.
	Perm []int `json:"perm,omitempty"`
	// Value holds a weight that is not in the model's graph (constant
	// folding made it while lowering), so that the entry does not need
	// the lowering that made it.
	Value *cachedValue `json:"value,omitempty"`
}

// cachedValue is a weight's value as lowering made it.
type cachedValue struct {
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Data  []byte  `json:"data"`
}

// encodeProgram encodes p, lowered from graph g, for the StableHLO cache:
// its weights by name, their values only when g does not hold them.
func encodeProgram(p *lower.Program, g *fxgraph.Graph) ([]byte, error) {
	c := cachedProgram{Format: cacheFormat, Dims: p.Dims, Module: string(p.Module)}
	for _, q := range p.Params {
		ct := cachedTensor{Name: q.Name, Weight: q.Kind == lower.Weight, DType: q.DType.String(), Shape: q.Shape, Perm: q.Perm}
		if ct.Weight && q.Value != nil && g.Attrs[q.Name] == nil {
			ct.Value = &cachedValue{DType: q.Value.DType.String(), Shape: q.Value.Shape, Data: q.Value.Data}
		}
		c.Params = append(c.Params, ct)
	}
	for _, o := range p.Outputs {
		c.Outputs = append(c.Outputs, cachedTensor{Name: o.Name, DType: o.DType.String(), Shape: o.Shape})
	}
	return json.Marshal(c)
}

// cachedWeight returns the value of weight q of a cached program: its own
// (a folded weight), else g's.
func cachedWeight(q cachedTensor, g *fxgraph.Graph) (*tensor.Tensor, error) {
	if v := q.Value; v != nil {
		dt, err := tensor.ParseDType(v.DType)
		if err != nil {
			return nil, fmt.Errorf("cached program: weight %s: %w", q.Name, err)
		}
		if int64(len(v.Data)) != tensor.NumElements(v.Shape)*int64(dt.Size()) {
			return nil, fmt.Errorf("cached program: weight %s holds %d bytes for %s%s", q.Name, len(v.Data), dt, tensor.ShapeString(v.Shape))
		}
		return &tensor.Tensor{DType: dt, Shape: v.Shape, Data: v.Data}, nil
	}
	t := g.Attrs[q.Name]
	if t == nil {
		return nil, fmt.Errorf("cached program: weight %s is not in the model", q.Name)
	}
	return t, nil
}

// decodeProgram rebuilds a Program from its cache entry, taking the weights'
// values from g (a folded weight's from the entry). A weight g does not hold with the recorded dtype (after
// int64 narrowing) and shape, such as a tensor that constant folding made
// while lowering, makes the entry unusable.
func decodeProgram(data []byte, g *fxgraph.Graph) (*lower.Program, error) {
	var c cachedProgram
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("decode cached program: %w", err)
	}
	if c.Format != cacheFormat || c.Module == "" {
		return nil, fmt.Errorf("cached program has format %d, want %d", c.Format, cacheFormat)
	}
	p := &lower.Program{Module: []byte(c.Module), Dims: c.Dims}
	for _, q := range c.Params {
		dt, err := tensor.ParseDType(q.DType)
		if err != nil {
			return nil, fmt.Errorf("cached program: parameter %s: %w", q.Name, err)
		}
		param := lower.Param{Name: q.Name, Kind: lower.Input, DType: dt, Shape: q.Shape}
		if q.Weight {
			param.Kind = lower.Weight
			t, err := cachedWeight(q, g)
			if err != nil {
				return nil, err
			}
			if q.Perm != nil && !isPerm(q.Perm, t.Rank()) {
				return nil, fmt.Errorf("cached program: weight %s: %v is not a permutation of %s's dims", q.Name, q.Perm, t)
			}
			param.Perm = q.Perm
			if t.DType != dt {
				t = t.Convert(dt)
			}
			if tensor.ShapeString(lower.PermutedShape(t.Shape, q.Perm)) != tensor.ShapeString(q.Shape) {
				return nil, fmt.Errorf("cached program: weight %s is %s in the model, the program wants %s%s", q.Name, t, dt, tensor.ShapeString(q.Shape))
			}
			param.Value = t
		}
		p.Params = append(p.Params, param)
	}
	for _, o := range c.Outputs {
		dt, err := tensor.ParseDType(o.DType)
		if err != nil {
			return nil, fmt.Errorf("cached program: output %s: %w", o.Name, err)
		}
		p.Outputs = append(p.Outputs, lower.Output{Name: o.Name, DType: dt, Shape: o.Shape})
	}
	return p, nil
}

// isPerm reports whether p is a permutation of 0..rank-1.
func isPerm(p []int, rank int) bool {
	if len(p) != rank {
		return false
	}
	seen := make([]bool, rank)
	for _, d := range p {
		if d < 0 || d >= rank || seen[d] {
			return false
		}
		seen[d] = true
	}
	return true
}
