package grpcapi

import (
	"context"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/api/payload"
)

// Triton's system shared-memory parameters of an input or output.
const (
	paramShmRegion = "shared_memory_region"
	paramShmSize   = "shared_memory_byte_size"
	paramShmOffset = "shared_memory_offset"
)

// shmPlace is a tensor's place in a shared-memory region.
type shmPlace struct {
	region       string
	offset, size int64
}

// params are an output's parameters in the response: its region and the
// bytes written there.
func (p shmPlace) params(written int64) map[string]*pb.InferParameter {
	out := map[string]*pb.InferParameter{
		paramShmRegion: {ParameterChoice: &pb.InferParameter_StringParam{StringParam: p.region}},
		paramShmSize:   {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: written}},
	}
	if p.offset != 0 {
		out[paramShmOffset] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: p.offset}}
	}
	return out
}

// intParam reads an int64_param or uint64_param.
func intParam(p *pb.InferParameter, where, key string) (int64, error) {
	switch v := p.GetParameterChoice().(type) {
	case *pb.InferParameter_Int64Param:
		return v.Int64Param, nil
	case *pb.InferParameter_Uint64Param:
		if v.Uint64Param <= 1<<62 {
			return int64(v.Uint64Param), nil
		}
	}
	return 0, payload.BadRequest("%s: parameters.%s is %v, want an int64_param of bytes", where, key, p)
}

// shmParams reads a tensor's shared-memory parameters; ok is false when it
// has none.
func shmParams(params map[string]*pb.InferParameter, where string) (place shmPlace, ok bool, err error) {
	region, hasRegion := params[paramShmRegion]
	size, hasSize := params[paramShmSize]
	off, hasOffset := params[paramShmOffset]
	switch {
	case !hasRegion && !hasSize && !hasOffset:
		return shmPlace{}, false, nil
	case !hasRegion || !hasSize:
		return shmPlace{}, false, payload.BadRequest("%s: give parameters.%s and %s together", where, paramShmRegion, paramShmSize)
	}
	sp, isString := region.GetParameterChoice().(*pb.InferParameter_StringParam)
	if !isString {
		return shmPlace{}, false, payload.BadRequest("%s: parameters.%s is %v, want a string_param", where, paramShmRegion, region)
	}
	place.region = sp.StringParam
	if place.size, err = intParam(size, where, paramShmSize); err != nil {
		return shmPlace{}, false, err
	}
	if hasOffset {
		if place.offset, err = intParam(off, where, paramShmOffset); err != nil {
			return shmPlace{}, false, err
		}
	}
	return place, true, nil
}

// shmError is a registry error as INVALID_ARGUMENT naming the region.
func shmError(err error) error {
	return payload.BadRequest("%v", err)
}

// SystemSharedMemoryStatus reports region r.Name, or every region.
func (s *Server) SystemSharedMemoryStatus(_ context.Context, r *pb.SystemSharedMemoryStatusRequest) (*pb.SystemSharedMemoryStatusResponse, error) {
	regions, err := s.shm.Status(r.Name)
	if err != nil {
		return nil, shmError(err)
	}
	out := &pb.SystemSharedMemoryStatusResponse{Regions: map[string]*pb.SystemSharedMemoryStatusResponse_RegionStatus{}}
	for _, g := range regions {
		out.Regions[g.Name] = &pb.SystemSharedMemoryStatusResponse_RegionStatus{Name: g.Name, Key: g.Key, Offset: uint64(g.Offset), ByteSize: uint64(g.ByteSize)}
	}
	return out, nil
}

// SystemSharedMemoryRegister maps a region of a shared-memory object.
func (s *Server) SystemSharedMemoryRegister(_ context.Context, r *pb.SystemSharedMemoryRegisterRequest) (*pb.SystemSharedMemoryRegisterResponse, error) {
	if r.Offset > 1<<62 || r.ByteSize > 1<<62 {
		return nil, payload.BadRequest("region %q: offset %d and byte_size %d are out of range", r.Name, r.Offset, r.ByteSize)
	}
	if err := s.shm.Register(r.Name, r.Key, int64(r.Offset), int64(r.ByteSize)); err != nil {
		return nil, shmError(err)
	}
	return &pb.SystemSharedMemoryRegisterResponse{}, nil
}

// SystemSharedMemoryUnregister unmaps region r.Name, or every region.
func (s *Server) SystemSharedMemoryUnregister(_ context.Context, r *pb.SystemSharedMemoryUnregisterRequest) (*pb.SystemSharedMemoryUnregisterResponse, error) {
	if err := s.shm.Unregister(r.Name); err != nil {
		return nil, shmError(err)
	}
	return &pb.SystemSharedMemoryUnregisterResponse{}, nil
}
