package loadtest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// RandomSpec describes a random input tensor: its name, dtype and shape.
type RandomSpec struct {
	Name  string
	DType tensor.DType
	Shape []int64
}

// String formats the spec as ParseRandomSpec reads it.
func (r RandomSpec) String() string {
	dims := make([]string, len(r.Shape))
	for i, d := range r.Shape {
		dims[i] = strconv.FormatInt(d, 10)
	}
	return fmt.Sprintf("%s=%s:%s", r.Name, r.DType, strings.Join(dims, "x"))
}

// ParseRandomSpec parses "NAME=DTYPE:SHAPE", e.g. "image=float32:1x3x32x32"
// (dims separated by "x" or ","; an empty shape is a scalar).
func ParseRandomSpec(s string) (RandomSpec, error) {
	name, rest, ok := strings.Cut(s, "=")
	dt, shape, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || name == "" {
		return RandomSpec{}, fmt.Errorf("%w: random input %q: want NAME=DTYPE:SHAPE, e.g. image=float32:1x3x32x32", ErrInput, s)
	}
	d, err := tensor.ParseDType(dt)
	if err != nil {
		return RandomSpec{}, fmt.Errorf("%w: random input %q: %v", ErrInput, s, err)
	}
	if d == tensor.String || d == tensor.Invalid {
		return RandomSpec{}, fmt.Errorf("%w: random input %q: cannot generate %s tensors", ErrInput, s, d)
	}
	dims, err := ParseShape(shape)
	if err != nil {
		return RandomSpec{}, fmt.Errorf("%w: random input %q: %v", ErrInput, s, err)
	}
	return RandomSpec{Name: name, DType: d, Shape: dims}, nil
}

// maxRandomElements bounds one random tensor (1 Gi elements).
const maxRandomElements = 1 << 30

// ParseShape parses dims separated by "x" or "," ("1x3x32x32", "[2,5]");
// an empty string is a scalar's shape.
func ParseShape(s string) ([]int64, error) {
	s = strings.TrimSpace(strings.Trim(strings.TrimSpace(s), "[]()"))
	if s == "" {
		return []int64{}, nil
	}
	parts := strings.FieldsFunc(s, func(r rune) bool { return r == 'x' || r == 'X' || r == ',' })
	dims := make([]int64, len(parts))
	for i, p := range parts {
		d, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("shape %q: dim %q is not a non-negative integer", s, p)
		}
		dims[i] = d
	}
	if n := tensor.NumElements(dims); n < 0 || n > maxRandomElements {
		return nil, fmt.Errorf("shape %q: too many elements (at most %d)", s, maxRandomElements)
	}
	return dims, nil
}

// Inputs is an InputSource of tensors read from .npy files and random
// tensors, optionally re-batched along dim 0.
//
// With Batch 0 every sample uses the files' tensors and the specs' shapes as
// they are. With Batch N, dim 0 is the batch: a file's rows are cut into
// samples of N rows each (cycling through the rows when the file has fewer,
// so a file of 2 rows gives 2 samples of 1 row at Batch 1, and 1 sample of
// 8 rows at Batch 8), and random tensors get N rows.
type Inputs struct {
	// Files maps an input name to a .npy file.
	Files map[string]string
	// Random lists inputs filled with random values: floats uniform in
	// [-1, 1), integers uniform in [0, 10), booleans half true.
	Random []RandomSpec
	// Batch is the number of rows per request along dim 0; 0 keeps shapes.
	Batch int
	// Variants is the least number of distinct samples to make (random data
	// differs between them); default 1.
	Variants int
	// Seed seeds the random data: the same seed gives the same tensors.
	Seed uint64
}

// Samples reads the files, generates the random tensors and returns the
// samples.
func (in *Inputs) Samples() ([]Sample, error) {
	if in.Batch < 0 || in.Variants < 0 {
		return nil, fmt.Errorf("%w: Batch %d and Variants %d must not be negative", ErrOptions, in.Batch, in.Variants)
	}
	if len(in.Files) == 0 && len(in.Random) == 0 {
		return nil, fmt.Errorf("%w: no inputs: give .npy files or random input specs", ErrInput)
	}
	names, files, n, err := in.readFiles()
	if err != nil {
		return nil, err
	}
	for _, r := range in.Random {
		if _, ok := files[r.Name]; ok {
			return nil, fmt.Errorf("%w: input %s is given both as a file and as random", ErrInput, r.Name)
		}
		if in.Batch > 0 && len(r.Shape) == 0 {
			return nil, fmt.Errorf("%w: random input %s is a scalar; it has no dim 0 to batch", ErrInput, r.Name)
		}
	}
	samples := make([]Sample, n)
	for i := range samples {
		s := Sample{}
		for _, name := range names {
			t := files[name]
			if in.Batch > 0 {
				t = takeRows(t, i*in.Batch, in.Batch)
			}
			s[name] = t
		}
		if err := in.addRandom(s, i); err != nil {
			return nil, err
		}
		samples[i] = s
	}
	return samples, nil
}

// readFiles reads the .npy files, by sorted name, and returns the number
// of samples they make: Variants, or more to use every row in batches.
func (in *Inputs) readFiles() (names []string, files map[string]*tensor.Tensor, n int, err error) {
	names = make([]string, 0, len(in.Files))
	for name := range in.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	n = max(in.Variants, 1)
	files = map[string]*tensor.Tensor{}
	for _, name := range names {
		t, err := tensor.ReadNpyFile(in.Files[name])
		if err != nil {
			return nil, nil, 0, fmt.Errorf("%w: input %s: %v", ErrInput, name, err)
		}
		if in.Batch > 0 {
			if t.Rank() == 0 || t.Shape[0] == 0 {
				return nil, nil, 0, fmt.Errorf("%w: input %s: %s has no rows along dim 0 to batch", ErrInput, name, t)
			}
			rows := int(t.Shape[0])
			n = max(n, (rows+in.Batch-1)/in.Batch)
		}
		files[name] = t
	}
	return names, files, n, nil
}

// addRandom adds sample i's random tensors to s, each seeded by Seed, i
// and its place in Random.
func (in *Inputs) addRandom(s Sample, i int) error {
	for k, r := range in.Random {
		if _, dup := s[r.Name]; dup {
			return fmt.Errorf("%w: random input %s given twice", ErrInput, r.Name)
		}
		shape := append([]int64{}, r.Shape...)
		if in.Batch > 0 {
			shape[0] = int64(in.Batch)
		}
		if nel := tensor.NumElements(shape); nel < 0 || nel > maxRandomElements {
			return fmt.Errorf("%w: random input %s: shape %v has too many elements", ErrInput, r.Name, shape)
		}
		s[r.Name] = randomTensor(r.DType, shape, rand.New(rand.NewPCG(in.Seed, uint64(i)<<32|uint64(k))))
	}
	return nil
}

// takeRows returns n rows of t along dim 0 starting at row first, wrapping
// around when it runs out of rows.
func takeRows(t *tensor.Tensor, first, n int) *tensor.Tensor {
	rows := int(t.Shape[0])
	rowBytes := len(t.Data) / rows
	out := &tensor.Tensor{DType: t.DType, Shape: append([]int64{int64(n)}, t.Shape[1:]...)}
	if n == rows && first%rows == 0 {
		out.Data = t.Data
		return out
	}
	out.Data = make([]byte, 0, n*rowBytes)
	for j := range n {
		r := (first + j) % rows
		out.Data = append(out.Data, t.Data[r*rowBytes:(r+1)*rowBytes]...)
	}
	return out
}

func randomTensor(dt tensor.DType, shape []int64, rng *rand.Rand) *tensor.Tensor {
	t := tensor.New(dt, shape...)
	n := t.NumElements()
	for i := range n {
		switch {
		case dt == tensor.Bool:
			t.SetInt64(i, int64(rng.IntN(2)))
		case dt.IsInt():
			t.SetInt64(i, int64(rng.IntN(10)))
		default:
			t.SetFloat64(i, rng.Float64()*2-1)
		}
	}
	return t
}
