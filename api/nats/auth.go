package natsapi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// The embedded server's authorization: NKey users only, nothing anonymous,
// each confined to its own inbox prefix, _INBOX.<its public key>
// (InboxPrefix), so that no user can read what is sent to another.
//
//   - the serving user, whose seed never leaves the process: Embedded.Connect
//     signs in with it and uses its inbox prefix. It may subscribe only to
//     xserve's subjects (PREFIX.>), service discovery ($SRV.>) and its own
//     inbox (where the JetStream API answers it and the durable requests it
//     pulls arrive); it may publish only replies (_INBOX.>: the server
//     checks each reply subject, see Server.validReply; not its own inbox)
//     requests forwarded to the replica holding a model and their replies
//     (PREFIX.warm.>, PREFIX.fwd.>), to the JetStream API ($JS.API.>,
//     $JS.ACK.>) but none of its
//     destructive calls on the request stream (deleting or purging it, its
//     messages or its consumer), and to object stores ($O.>: the cluster
//     compile cache, whose own streams it may purge). It has no permission to answer whatever reply subject a
//     request names (no allow_responses), so that a request cannot make it
//     publish to a $JS subject, even through the service discovery
//     handlers the server does not check.
//   - client users, each with its seed in a 0600 file: "client"
//     (EmbeddedOptions.ClientNkeyFile; `xserve nats-infer --nats-nkey`,
//     loadtest -nats-nkey, nats --nkey) and one per name of
//     EmbeddedOptions.Clients. A client may publish only requests
//     (PREFIX.infer, PREFIX.infer.>, PREFIX.seq.> to the replica holding a
//     sequence, PREFIX.durable.>), readiness checks
//     (PREFIX.health) and discovery requests ($SRV.>), and subscribe only
//     to its own inbox prefix: it cannot join the replicas' queue group,
//     read requests or other clients' replies, or reach the JetStream API
//     (no purging the stream or deleting its consumer). Its client must use
//     that inbox prefix (natsapi.Connect does, from the seed; nats
//     --inbox-prefix _INBOX.<public key>).
//
// docs/NATS.md has the table of what each credential can and cannot do.

// InboxPrefix is the inbox prefix of the embedded server's user with
// public key pub: its replies go to subjects under InboxPrefix(pub)+".".
func InboxPrefix(pub string) string { return "_INBOX." + pub }

// destructiveJS are the JetStream API calls the serving user may not make:
// those that delete or purge the request stream, its messages or its
// consumers, and account-wide and server calls. (The cluster compile
// cache's object store purges its own stream's chunks.)
func destructiveJS(stream string) []string {
	return []string{
		"$JS.API.STREAM.DELETE." + stream, "$JS.API.STREAM.PURGE." + stream, "$JS.API.STREAM.MSG.DELETE." + stream,
		"$JS.API.CONSUMER.DELETE." + stream + ".>", "$JS.API.STREAM.SNAPSHOT.>", "$JS.API.STREAM.RESTORE.>",
		"$JS.API.ACCOUNT.PURGE.>", "$JS.API.META.>", "$JS.API.SERVER.>",
	}
}

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

// servingPermissions are the serving user's, whose public key is pub.
func servingPermissions(prefix, pub string) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: []string{"_INBOX.>", "$JS.API.>", "$JS.ACK.>", "$O.>", prefix + ".warm.>", prefix + ".fwd.>"},
			// Nor to its own inbox, where only the server and JetStream
			// publish: the discovery handlers answer any reply subject.
			Deny: append([]string{InboxPrefix(pub) + ".>"}, destructiveJS(DefaultStream)...),
		},
		Subscribe: &server.SubjectPermission{Allow: []string{prefix + ".>", "$SRV.>", InboxPrefix(pub) + ".>"}},
	}
}

// clientPermissions are a client user's, whose public key is pub.
func clientPermissions(prefix, pub string) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: []string{prefix + ".infer", prefix + ".infer.>", prefix + ".seq.>", prefix + ".generate.>", prefix + ".durable.>", prefix + ".health", "$SRV.>"},
			Deny:  []string{"$JS.>", "$SYS.>"},
		},
		Subscribe: &server.SubjectPermission{
			Allow: []string{InboxPrefix(pub) + ".>"},
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
