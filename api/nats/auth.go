package natsapi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// The embedded server's authorization. Two NKey users, nothing anonymous:
//
//   - the serving user, whose seed never leaves the process: Embedded.Connect
//     signs in with it. It may subscribe only to xserve's subjects
//     (PREFIX.>), service discovery ($SRV.>) and inboxes (_INBOX.>), and
//     publish replies (to inboxes and to the reply subject of a request it
//     received), to the JetStream API ($JS.API.>, $JS.ACK.>: the durable
//     stream and consumer), to object stores ($O.>: the cluster compile
//     cache) and to $SRV.>.
//   - the client user, whose seed is in a 0600 file
//     (EmbeddedOptions.ClientNkeyFile; `xserve nats-infer --nats-nkey`,
//     loadtest -nats-nkey, nats --nkey). It may publish only requests
//     (PREFIX.>) and discovery requests ($SRV.>), and subscribe only to
//     inboxes (_INBOX.>) for the replies: it cannot join the replicas' queue
//     group, read other subjects, or reach the JetStream API (no purging
//     the stream or deleting its consumer).
//
// A client with the client seed can still subscribe to every inbox and so
// read replies meant for other clients: give each application its own NATS
// server (--nats-url) with accounts where that matters.

// nkeyUser is one user of the embedded server.
type nkeyUser struct {
	kp  nkeys.KeyPair
	pub string
}

func newNkeyUser(kp nkeys.KeyPair) (*nkeyUser, error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("natsapi: nkey: %w", err)
	}
	return &nkeyUser{kp: kp, pub: pub}, nil
}

// loadOrCreateSeed returns the user in the seed file path, creating the file
// (mode 0600, in a directory of mode 0700 when it makes one) with a new user
// when it does not exist, so that clients keep their credentials across
// restarts. A seed file that others may read is refused.
func loadOrCreateSeed(path string) (*nkeyUser, error) {
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("natsapi: %w", err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("natsapi: NATS client seed %s has mode %v; others must not read it (chmod 600 it, or delete it to have a new one made)", path, fi.Mode().Perm())
		}
		kp, err := nkeys.FromSeed(bytes.TrimSpace(data))
		if err != nil {
			return nil, fmt.Errorf("natsapi: NATS client seed %s: %w (delete it to have a new one made)", path, err)
		}
		return newNkeyUser(kp)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("natsapi: %w", err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("natsapi: nkey: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("natsapi: nkey: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("natsapi: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-seed-*")
	if err != nil {
		return nil, fmt.Errorf("natsapi: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(seed, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o600)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return nil, fmt.Errorf("natsapi: write NATS client seed %s: %w", path, err)
	}
	return newNkeyUser(kp)
}

// servingPermissions are the serving user's.
func servingPermissions(prefix string) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"_INBOX.>", "$JS.API.>", "$JS.ACK.>", "$O.>", "$SRV.>", prefix + ".>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{prefix + ".>", "$SRV.>", "_INBOX.>"}},
		// Replies to the reply subject of a request received, whatever its
		// name.
		Response: &server.ResponsePermission{MaxMsgs: 1, Expires: 10 * time.Minute},
	}
}

// clientPermissions are the client user's.
func clientPermissions(prefix string) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: []string{prefix + ".infer", prefix + ".infer.>", prefix + ".generate.>", prefix + ".durable.>", "$SRV.>"},
			Deny:  []string{"$JS.>", "$SYS.>"},
		},
		Subscribe: &server.SubjectPermission{
			Allow: []string{"_INBOX.>"},
			Deny:  []string{prefix + ".>", "$JS.>", "$SRV.>", "$SYS.>"},
		},
	}
}

// isLoopback reports whether a listen host reaches only this machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
