package grpcapi

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/xserve/xserve/api/auth"
	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/internal/testcerts"
)

func TestAuth(t *testing.T) {
	tk, err := auth.Parse("user-token\nadmin-token admin", "test")
	if err != nil {
		t.Fatal(err)
	}
	c := startServer(t, Options{Auth: tk, OpenHealth: true})
	with := func(token string) context.Context {
		if token == "" {
			return context.Background()
		}
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	}
	check := func(what string, err error, want codes.Code) {
		t.Helper()
		if status.Code(err) != want {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	_, err = c.ModelMetadata(with(""), &pb.ModelMetadataRequest{Name: "double"})
	check("metadata without a token", err, codes.Unauthenticated)
	_, err = c.ModelMetadata(with("wrong"), &pb.ModelMetadataRequest{Name: "double"})
	check("metadata with a wrong token", err, codes.Unauthenticated)
	_, err = c.ModelMetadata(with("user-token"), &pb.ModelMetadataRequest{Name: "double"})
	check("metadata with a user token", err, codes.OK)
	_, err = c.RepositoryModelLoad(with("user-token"), &pb.RepositoryModelLoadRequest{ModelName: "double"})
	check("load with a user token", err, codes.PermissionDenied)
	_, err = c.RepositoryModelUnload(with("user-token"), &pb.RepositoryModelUnloadRequest{ModelName: "double"})
	check("unload with a user token", err, codes.PermissionDenied)
	_, err = c.RepositoryModelLoad(with("admin-token"), &pb.RepositoryModelLoadRequest{ModelName: "double"})
	check("load with an admin token", err, codes.OK)
	_, err = c.ServerReady(with(""), &pb.ServerReadyRequest{})
	check("ServerReady with OpenHealth", err, codes.OK)
	stream, err := c.ModelStreamInfer(with(""))
	if err == nil {
		_, err = stream.Recv()
	}
	check("a stream without a token", err, codes.Unauthenticated)
}

func TestTLS(t *testing.T) {
	certs := testcerts.New(t)
	cfg, err := auth.ServerTLS(auth.TLSOptions{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCAFile: certs.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveLoopback(t, doubler{}, Options{TLS: cfg})
	live := func(tc *tls.Config) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = pb.NewGRPCInferenceServiceClient(conn).ServerLive(ctx, &pb.ServerLiveRequest{})
		return err
	}
	if err := live(&tls.Config{RootCAs: certs.Pool, Certificates: []tls.Certificate{certs.Client}}); err != nil {
		t.Fatalf("mTLS client: %v", err)
	}
	if err := live(&tls.Config{RootCAs: certs.Pool}); err == nil {
		t.Error("a client without a certificate was answered")
	}
	if err := live(&tls.Config{Certificates: []tls.Certificate{certs.Client}}); err == nil {
		t.Error("a client that does not trust the server's CA was answered")
	}
}

func TestRequestID(t *testing.T) {
	c := startServer(t, Options{AccessLog: true})
	var hdr metadata.MD
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-request-id", "grpc-id-1")
	if _, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}, grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if got := hdr.Get("x-request-id"); len(got) != 1 || got[0] != "grpc-id-1" {
		t.Errorf("x-request-id = %v, want the client's", got)
	}
	ctx = metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if _, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "nope"}, grpc.Header(&hdr)); status.Code(err) != codes.NotFound {
		t.Fatal(err)
	}
	if got := hdr.Get("x-request-id"); len(got) != 1 || got[0] != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("x-request-id = %v, want the traceparent's trace id", got)
	}
}
