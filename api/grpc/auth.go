package grpcapi

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/xserve/xserve/api/auth"
)

// authorize checks the call's bearer token against the scope method needs
// when Options.Auth is set.
func (s *Server) authorize(ctx context.Context, method string) error {
	if s.opts.Auth == nil {
		return nil
	}
	name := method[strings.LastIndexByte(method, '/')+1:]
	need := auth.ScopeInfer
	switch name {
	case "ServerLive", "ServerReady", "ModelReady":
		if s.opts.OpenHealth {
			return nil
		}
	case "RepositoryModelLoad", "RepositoryModelUnload":
		need = auth.ScopeAdmin
	}
	var header string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			header = v[0]
		}
	}
	return s.toStatus(s.opts.Auth.Require(header, need))
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}
