// Package triton expresses serving's model configuration and statistics in
// the schemas of Triton's model configuration and statistics extensions
// (model_config.proto and grpc_service.proto, generated in
// api/grpc/inferencepb), for the HTTP (JSON) and gRPC (protobuf) APIs alike,
// and prints those messages as Triton's HTTP endpoints do: protobuf field
// names, 64-bit integers as JSON numbers, every scalar field present.
package triton
