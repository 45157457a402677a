// Package testcerts makes a throw-away certificate authority with a server
// certificate for 127.0.0.1 and a client certificate, written as PEM files,
// for tests of TLS and mutual TLS.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Set is the files and pools of one generated authority.
type Set struct {
	// CAFile, ServerCert, ServerKey, ClientCert and ClientKey are PEM files.
	CAFile, ServerCert, ServerKey, ClientCert, ClientKey string
	// Pool holds the CA, for clients to verify the server with.
	Pool *x509.CertPool
	// Client is the client's key pair, for mutual TLS.
	Client tls.Certificate
}

// New writes a fresh CA, server and client certificate into a temporary
// directory of t.
func New(t testing.TB) *Set {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	caKey := key(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "xserve test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	s := &Set{Pool: x509.NewCertPool()}
	s.Pool.AddCert(ca)
	s.CAFile = write(t, dir, "ca.pem", "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string, pair tls.Certificate) {
		k := key(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		certFile = write(t, dir, name+".pem", "CERTIFICATE", der)
		keyFile = write(t, dir, name+"-key.pem", "EC PRIVATE KEY", kder)
		pair, err = tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return certFile, keyFile, pair
	}
	s.ServerCert, s.ServerKey, _ = issue("server", 2, x509.ExtKeyUsageServerAuth)
	s.ClientCert, s.ClientKey, s.Client = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return s
}

func key(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func write(t testing.TB, dir, name, typ string, der []byte) string {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
