// Package auth checks bearer tokens for the HTTP and gRPC APIs and builds
// their TLS configurations.
//
// Tokens come from a file (one a line: the token, then optionally the word
// admin; blank lines and lines starting with # are skipped) or from an
// environment variable in the same form, lines separated by newlines or
// commas. Every token may infer and read metadata; repository changes
// (load, unload) need the admin scope. Tokens are compared in constant time
// against all known tokens (by their SHA-256), so neither a token's content
// nor its length leaks through timing.
package auth
