package payload

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// Triton's system shared-memory parameters of an input or output.
const (
	paramShmRegion = "shared_memory_region"
	paramShmSize   = "shared_memory_byte_size"
	paramShmOffset = "shared_memory_offset"
)

// shmParams reads an input's or output's shared-memory parameters; ok is
// false when it has none. where names the tensor for messages.
func shmParams(params map[string]json.RawMessage, where string, shared SharedMemory) (ref shmRef, ok bool, err error) {
	raw, hasRegion := params[paramShmRegion]
	_, hasSize := params[paramShmSize]
	_, hasOffset := params[paramShmOffset]
	switch {
	case !hasRegion && !hasSize && !hasOffset:
		return shmRef{}, false, nil
	case shared == nil:
		return shmRef{}, false, badRequest("%s: parameters.shared_memory_*: shared memory is not supported here (only on /v2/models/{model}/infer and gRPC ModelInfer); send the data in the body", where)
	case !hasRegion:
		return shmRef{}, false, badRequest("%s: parameters.%s or %s without parameters.%s", where, paramShmSize, paramShmOffset, paramShmRegion)
	}
	if err := json.Unmarshal(raw, &ref.region); err != nil {
		return shmRef{}, false, badRequest("%s: parameters.%s is %s, want a string", where, paramShmRegion, quoteTok(raw))
	}
	size, hasSize, err := paramInt(params, paramShmSize, where)
	if err != nil {
		return shmRef{}, false, err
	}
	if !hasSize {
		return shmRef{}, false, badRequest("%s: parameters.%s without parameters.%s", where, paramShmRegion, paramShmSize)
	}
	off, _, err := paramInt(params, paramShmOffset, where)
	if err != nil {
		return shmRef{}, false, err
	}
	ref.size, ref.offset = size, off
	return ref, true, nil
}

// sharedErr wraps a registry's error with the tensor it was for.
func sharedErr(where string, err error) error {
	return badRequest("%s: %v", where, err)
}

// sharedTensor reads input name of dt and shape from its shared-memory
// region.
func sharedTensor(name string, dt tensor.DType, shape []int64, ref shmRef, lim *Limits) (*tensor.Tensor, error) {
	where := "input " + strconv.Quote(name)
	if dt.Size() > 0 {
		if want := tensor.NumElements(shape) * int64(dt.Size()); ref.size != want {
			return nil, badRequest("%s: parameters.%s is %d bytes, %s%s needs %d", where, paramShmSize, ref.size, dt, tensor.ShapeString(shape), want)
		}
	}
	if err := lim.Lease.Reserve(ref.size, where); err != nil {
		return nil, err
	}
	data, err := lim.Shared.Read(ref.region, ref.offset, ref.size)
	if err != nil {
		return nil, sharedErr(where, err)
	}
	return binaryTensor(name, dt, shape, data)
}

// SharedInput makes input name from size bytes at offset of a
// shared-memory region, for the gRPC API.
func SharedInput(shared SharedMemory, name, datatype string, shape []int64, region string, offset, size, maxElems int64) (*tensor.Tensor, error) {
	if shared == nil {
		return nil, badRequest("input %q: shared memory is not supported here", name)
	}
	dt, err := parseDType(name, datatype)
	if err != nil {
		return nil, err
	}
	if _, err := checkShape(name, shape, maxElems); err != nil {
		return nil, err
	}
	return sharedTensor(name, dt, shape, shmRef{region: region, offset: offset, size: size}, &Limits{Shared: shared})
}

// sharedOutput reads an output's shared-memory parameters into d, checking
// the place now so that a bad region fails before the model runs.
func sharedOutput(d *Request, name string, params map[string]json.RawMessage) (bool, error) {
	where := "output " + strconv.Quote(name)
	ref, ok, err := shmParams(params, where, d.shared)
	if err != nil || !ok {
		return false, err
	}
	if err := d.shared.Check(ref.region, ref.offset, ref.size); err != nil {
		return false, sharedErr(where, err)
	}
	if d.sharedOut == nil {
		d.sharedOut = map[string]shmRef{}
	}
	d.sharedOut[name] = ref
	return true, nil
}

// WriteShared copies output nt's bytes into its shared-memory region:
// an output larger than the region's byte size is an error naming both.
func WriteShared(shared SharedMemory, nt serving.NamedTensor, region string, offset, size int64) (int64, error) {
	if nt.Tensor == nil {
		return 0, fmt.Errorf("payload: output %q: the backend returned no tensor", nt.Name)
	}
	raw := binaryBytes(nt.Tensor)
	if int64(len(raw)) > size {
		return 0, badRequest("output %q: the result is %d bytes (%s%s), more than parameters.%s %d of region %q", nt.Name, len(raw), nt.Tensor.DType, tensor.ShapeString(nt.Tensor.Shape), paramShmSize, size, region)
	}
	if err := shared.Write(region, offset, size, raw); err != nil {
		return 0, sharedErr("output "+strconv.Quote(nt.Name), err)
	}
	return int64(len(raw)), nil
}

// appendSharedOutput writes output nt to its region and its entry's
// datatype and shape to b: no data and no parameters, as Triton answers
// (its C++ client reads an output's "parameters" as the binary tensor
// extension's and wants binary_data_size there).
func appendSharedOutput(b []byte, d *Request, nt serving.NamedTensor, ref shmRef) ([]byte, error) {
	if _, err := WriteShared(d.shared, nt, ref.region, ref.offset, ref.size); err != nil {
		return nil, err
	}
	b = append(b, `"datatype":`...)
	b = appendJSONString(b, OIPDatatype(nt.Tensor.DType))
	b = append(b, `,"shape":`...)
	return appendShape(b, nt.Tensor.Shape), nil
}
